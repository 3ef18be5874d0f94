package agent

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestImageMapLookup(t *testing.T) {
	m, err := ParseImageMap([]byte(`
images:
  - image: quay.io/coreos/etcd:v3.6.16
    binds: {/usr/local/bin: /cache/etcd-v3.6.16}
    env: {PATH: /usr/local/bin:/bin}
  - image: quay.io/coreos/etcd:*
    binds: {/usr/local/bin: /cache/etcd-any}
  - image: busybox:*
  - image: registry:5000/x:1.0
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"quay.io/coreos/etcd:v3.6.16": "quay.io/coreos/etcd:v3.6.16",
		"quay.io/coreos/etcd:v3.5.0":  "quay.io/coreos/etcd:*",
		"busybox":                     "busybox:*",
		"busybox:1.36":                "busybox:*",
		"registry:5000/x:1.0":         "registry:5000/x:1.0",
	}
	for img, want := range cases {
		e, ok := m.Lookup(img)
		if !ok || e.Image != want {
			t.Errorf("Lookup(%s) = %v %v, want %s", img, e, ok, want)
		}
	}
	for _, img := range []string{"quay.io/coreos/etcdx:v1", "registry:5000/x:2.0", "docker.io/library/alpine:3"} {
		if _, ok := m.Lookup(img); ok {
			t.Errorf("Lookup(%s) matched", img)
		}
	}
	if _, err := ParseImageMap([]byte("images: [{binds: {}}]")); err == nil {
		t.Error("entry without image accepted")
	}
}

func TestExpand(t *testing.T) {
	m := MapFunc([]EnvPair{{"A", "1"}, {"B", "two"}})
	cases := map[string]string{
		"$(A)":         "1",
		"x$(A)y$(B)z":  "x1ytwoz",
		"$$(A)":        "$(A)",
		"$(C)":         "$(C)",
		"$(A":          "$(A",
		"$A":           "$A",
		"end$":         "end$",
		"$$$(B)":       "$two",
		"--name=$(B)$": "--name=two$",
	}
	for in, want := range cases {
		if got := Expand(in, m); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

type fakeSources struct{}

func (fakeSources) GetSecret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	return &corev1.Secret{Data: map[string][]byte{"pw": []byte("s3")}}, nil
}
func (fakeSources) GetConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return &corev1.ConfigMap{Data: map[string]string{"k": "v", "a": "b"}}, nil
}

func TestResolveEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "sa"}}
	c := &corev1.Container{
		Name:      "c",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}},
		EnvFrom:   []corev1.EnvFromSource{{Prefix: "P_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
		Env: []corev1.EnvVar{
			{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "PROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "pw"}}},
			{Name: "URL", Value: "http://$(IP):2379/$(NAME)/$(MISSING)"},
		},
		Args: []string{"--n=$(NAME)", "$$(NAME)"},
	}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	env, err := ResolveEnv(context.Background(), EnvInput{Pod: pod, Container: c, PodIP: "10.213.1.5", Alloc: alloc, Sources: fakeSources{},
		Base: []EnvPair{{"PATH", "/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range env {
		got[e.Name] = e.Value
	}
	want := map[string]string{"PATH": "/bin", "P_k": "v", "P_a": "b", "NAME": "p", "IP": "10.213.1.5", "APP": "x",
		"PROCS": "2", "MEM": "8192", "PW": "s3", "URL": "http://10.213.1.5:2379/p/$(MISSING)"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	argv := Argv(&ImageEntry{Entrypoint: []string{"/bin/etcd"}, Cmd: []string{"--default"}}, c, env)
	if strings.Join(argv, " ") != "/bin/etcd --n=p $(NAME)" {
		t.Errorf("argv = %v", argv)
	}
	c2 := &corev1.Container{Command: []string{"sh"}}
	if a := Argv(&ImageEntry{Entrypoint: []string{"/e"}, Cmd: []string{"c"}}, c2, nil); strings.Join(a, " ") != "sh" {
		t.Errorf("command must drop image cmd: %v", a)
	}
	if a := Argv(&ImageEntry{Cmd: []string{"/bin/etcd"}}, &corev1.Container{}, nil); strings.Join(a, " ") != "/bin/etcd" {
		t.Errorf("image cmd: %v", a)
	}
}

func TestIPAM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	a, err := NewIPAM(path, "10.213.1.0/29")
	if err != nil {
		t.Fatal(err)
	}
	ip1, _ := a.Allocate("a")
	ip2, _ := a.Allocate("b")
	if ip1.String() != "10.213.1.2" || ip2.String() != "10.213.1.3" {
		t.Fatalf("got %s %s", ip1, ip2)
	}
	if again, _ := a.Allocate("a"); !again.Equal(ip1) {
		t.Fatalf("same owner got a new ip %s", again)
	}
	// persisted: a new allocator must not hand out live IPs
	b, _ := NewIPAM(path, "10.213.1.0/29")
	ip3, _ := b.Allocate("c")
	if ip3.String() != "10.213.1.4" {
		t.Fatalf("reused a live IP: %s", ip3)
	}
	b.Allocate("d")
	b.Allocate("e")
	if _, err := b.Allocate("f"); err == nil { // .7 is broadcast
		t.Fatal("allocated past the end of the CIDR")
	}
	_ = b.Release("a")
	// round-robin: after .6 (the last one handed out) it wraps to the freed .2
	if ip, _ := b.Allocate("g"); !ip.Equal(net.ParseIP("10.213.1.2")) {
		t.Fatalf("released IP not reused: %s", ip)
	}
	_ = b.Release("c") // .4
	_ = b.Release("b") // .3
	// next after .2 is .3: round-robin continues from the last allocation
	if ip, _ := b.Allocate("h"); !ip.Equal(net.ParseIP("10.213.1.3")) {
		t.Fatalf("round robin: got %s", ip)
	}
	c, _ := NewIPAM(path, "10.213.1.0/29")
	if ip, _ := c.Allocate("i"); !ip.Equal(net.ParseIP("10.213.1.4")) {
		t.Fatalf("last allocation not persisted: got %s", ip)
	}
}

func TestIPAMRoundRobin(t *testing.T) {
	a, _ := NewIPAM("", "10.213.1.0/24")
	ip1, _ := a.Allocate("a")
	_ = a.Release("a")
	ip2, _ := a.Allocate("b")
	if ip1.Equal(ip2) {
		t.Fatalf("a just-released IP was reused at once: %s", ip2)
	}
}

func TestBackoff(t *testing.T) {
	base, max := time.Second, 30*time.Second
	want := []time.Duration{0, 1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := Backoff(base, max, i); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i, got, w)
		}
	}
	if Backoff(10*time.Second, 5*time.Minute, 100) != 5*time.Minute {
		t.Error("no cap")
	}
}

func TestEtcFiles(t *testing.T) {
	h := HostsFile("10.213.1.2", "etcd-0", "etcd", "default", "cluster.local", nil)
	if !strings.Contains(h, "10.213.1.2\tetcd-0.etcd.default.svc.cluster.local\tetcd-0\n") || !strings.Contains(h, "127.0.0.1\tlocalhost\n") {
		t.Errorf("hosts:\n%s", h)
	}
	h = HostsFile("10.213.1.3", "box", "", "default", "cluster.local", nil)
	if !strings.HasSuffix(h, "10.213.1.3\tbox\n") {
		t.Errorf("hosts:\n%s", h)
	}
	r := ResolvConf("10.213.0.1", "ns1", "cluster.local", nil)
	if r != "nameserver 10.213.0.1\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n" {
		t.Errorf("resolv.conf:\n%s", r)
	}
	if NetNSName("c4ec754d-08ee-4299") != "qk-c4ec754d08ee" || HostVethName("c4ec754d-08ee-4299") != "qkhc4ec754d08" {
		t.Error("names")
	}
}
