package initproc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "run"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var"), 0o755))
	must(os.Symlink("/run", filepath.Join(root, "var", "run")))   // absolute: must stay in root
	must(os.Symlink("../run", filepath.Join(root, "var", "rel"))) // relative
	must(os.Symlink("/../../..", filepath.Join(root, "escape")))
	cases := map[string]string{
		"/var/run/secrets/x": filepath.Join(root, "run/secrets/x"),
		"/var/rel/a":         filepath.Join(root, "run/a"),
		"/escape/etc":        filepath.Join(root, "etc"),
		"/../../etc/hosts":   filepath.Join(root, "etc/hosts"),
		"/":                  root,
	}
	for in, want := range cases {
		got, err := ResolveInRoot(root, in)
		if err != nil || got != want {
			t.Errorf("ResolveInRoot(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	if _, err := ResolveInRoot(root, "/loop/x"); err == nil {
		t.Error("symlink loop not detected")
	}
}
