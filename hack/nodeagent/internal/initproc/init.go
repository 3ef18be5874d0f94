// Package initproc is the in-container half of the node agent: it runs as
// `nodeagent init --spec FILE` in fresh mount and UTS namespaces (created by
// the agent through clone flags), joins the pod network namespace, builds the
// container root (overlay of / with a tmpfs upper layer plus bind mounts),
// chroots into it and execs the container process.
package initproc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one mount inside the container root.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"` // path inside the container
	Type     string `json:"type"`   // "bind" (default) or "tmpfs"
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Spec describes how to start one container process.
type Spec struct {
	NetNS      string   `json:"netns,omitempty"`    // path of the pod netns, empty = host network
	Hostname   string   `json:"hostname,omitempty"` // set in the (new) UTS namespace
	Scratch    string   `json:"scratch"`            // host dir; a tmpfs is mounted here inside the mount ns
	Mounts     []Mount  `json:"mounts"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	WorkingDir string   `json:"workingDir,omitempty"`
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "nodeagent init: "+format+"\n", a...)
	os.Exit(128)
}

// Main is the entry point of `nodeagent init`.
func Main(args []string) {
	runtime.LockOSThread()
	var specPath string
	for i := 0; i < len(args); i++ {
		if args[i] == "--spec" && i+1 < len(args) {
			specPath = args[i+1]
			i++
		} else if strings.HasPrefix(args[i], "--spec=") {
			specPath = strings.TrimPrefix(args[i], "--spec=")
		}
	}
	data, err := os.ReadFile(specPath)
	if err != nil {
		fail("read spec: %v", err)
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		fail("parse spec: %v", err)
	}
	if err := Setup(&s); err != nil {
		fail("%v", err)
	}
	bin, err := lookPath(s.Argv[0], s.Env)
	if err != nil {
		fail("%v", err)
	}
	err = unix.Exec(bin, s.Argv, s.Env)
	fail("exec %s: %v", bin, err)
}

func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			path = e[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file %q not found in $PATH", file)
}

// Setup does everything but the final exec. It must run on a locked OS thread
// in a process created with CLONE_NEWNS (and CLONE_NEWUTS when Hostname is set).
func Setup(s *Spec) error {
	if len(s.Argv) == 0 {
		return fmt.Errorf("no command given")
	}
	if s.NetNS != "" {
		fd, err := unix.Open(s.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open netns %s: %w", s.NetNS, err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", s.NetNS, err)
		}
		unix.Close(fd)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
	}
	// Nothing we mount below may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := os.MkdirAll(s.Scratch, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", s.Scratch, "tmpfs", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount scratch tmpfs: %w", err)
	}
	upper, work, root := filepath.Join(s.Scratch, "upper"), filepath.Join(s.Scratch, "work"), filepath.Join(s.Scratch, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("mount overlay root: %w", err)
	}
	base := []Mount{
		{Source: "/proc", Target: "/proc"},
		{Source: "/dev", Target: "/dev"},
		{Source: "/sys", Target: "/sys"},
		{Source: "tmpfs", Target: "/tmp", Type: "tmpfs"},
	}
	for _, m := range append(base, s.Mounts...) {
		if err := doMount(root, m); err != nil {
			return err
		}
	}
	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	wd := s.WorkingDir
	if wd == "" {
		wd = "/"
	}
	_ = os.MkdirAll(wd, 0o755)
	if err := unix.Chdir(wd); err != nil {
		return fmt.Errorf("chdir %s: %w", wd, err)
	}
	return nil
}

// ResolveInRoot resolves path inside root like chroot would: symlinks
// (absolute ones included) never lead outside root. Missing trailing
// components are returned unresolved.
func ResolveInRoot(root, path string) (string, error) {
	parts := strings.Split(filepath.Clean("/"+path), "/")
	cur := "/"
	hops := 0
	for i := 0; i < len(parts); i++ {
		p := parts[i]
		if p == "" || p == "." {
			continue
		}
		if p == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, p)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		hops++
		if hops > 40 {
			return "", fmt.Errorf("too many symlinks resolving %s", path)
		}
		link, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		rest := append(strings.Split(link, "/"), parts[i+1:]...)
		if filepath.IsAbs(link) {
			cur = "/"
		}
		parts = rest
		i = -1
	}
	return filepath.Join(root, cur), nil
}

func doMount(root string, m Mount) error {
	target, err := ResolveInRoot(root, m.Target)
	if err != nil {
		return err
	}
	if m.Type == "tmpfs" {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount tmpfs %s: %w", m.Target, err)
		}
		return nil
	}
	st, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("bind source %s: %w", m.Source, err)
	}
	if st.IsDir() {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", m.Target, err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if _, err := os.Lstat(target); err != nil {
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("create mount point %s: %w", m.Target, err)
			}
			f.Close()
		}
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s -> %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount ro %s: %w", m.Target, err)
		}
	}
	return nil
}
