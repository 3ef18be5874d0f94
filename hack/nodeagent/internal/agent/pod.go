package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"quorumkeeper.dev/nodeagent/internal/initproc"
)

// ctr is the runtime state of one container (init or app).
type ctr struct {
	spec      corev1.Container
	init      bool
	status    corev1.ContainerStatus
	pid       int
	env       []EnvPair
	backoffN  int
	killMsg   string
	stopInst  context.CancelFunc
	exitCh    chan struct{}
	readyRuns int
}

type podRuntime struct {
	p      *Provider
	mu     sync.Mutex
	pod    *corev1.Pod
	dir    string
	state  *PodState
	tokens map[string]*tokenCache
	ctrs   []*ctr

	ctx    context.Context
	cancel context.CancelFunc

	phase       corev1.PodPhase
	reason      string
	message     string
	startTime   metav1.Time
	initialized bool
	condTimes   map[corev1.PodConditionType]metav1.Time
	condVals    map[corev1.PodConditionType]corev1.ConditionStatus
	deleting    bool
	deadline    time.Time
	// closed, and replaced, when a later delete shortens the grace period (as the kubelet
	// does, a pod already terminating is then killed at the earlier deadline)
	deadlineMoved chan struct{}
	netUp         bool
	vols          map[string]string

	notifyCh chan struct{}
	done     chan struct{}
	removed  chan struct{} // closed once the pod left the provider's map
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (pr *podRuntime) logf(format string, a ...any) {
	pod := pr.getPod()
	pr.p.logf("pod %s/%s: "+format, append([]any{pod.Namespace, pod.Name}, a...)...)
}

func (pr *podRuntime) getPod() *corev1.Pod {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.pod
}

func (pr *podRuntime) podIP() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.state.PodIP
}

func (pr *podRuntime) saveState() {
	pr.mu.Lock()
	data, _ := json.Marshal(pr.state)
	pr.mu.Unlock()
	var s PodState
	_ = json.Unmarshal(data, &s)
	if err := SaveState(pr.dir, &s); err != nil {
		pr.p.logf("save state %s: %v", pr.dir, err)
	}
}

func (pr *podRuntime) notify() {
	select {
	case pr.notifyCh <- struct{}{}:
	default:
	}
}

func (pr *podRuntime) notifier() {
	for {
		select {
		case <-pr.notifyCh:
			pr.p.notify(pr.podWithStatus())
		case <-pr.done:
			pr.p.notify(pr.podWithStatus())
			return
		}
	}
}

func (pr *podRuntime) setWaiting(c *ctr, reason, msg string) {
	pr.mu.Lock()
	changed := c.status.State.Waiting == nil || c.status.State.Waiting.Reason != reason || c.status.State.Waiting.Message != msg
	c.status.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	c.status.Ready = false
	c.status.Started = new(bool)
	pr.mu.Unlock()
	if changed {
		pr.notify()
	}
}

func (pr *podRuntime) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-pr.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run is the pod's main loop.
func (pr *podRuntime) run() {
	defer close(pr.done)
	defer pr.teardown()
	pr.notify()
	// volumes and network
	for {
		err := pr.setup()
		if err == nil {
			break
		}
		reason := "ContainerCreating"
		var ve *volumeError
		if errors.As(err, &ve) {
			reason = ve.reason
		}
		pr.logf("setup: %v", err)
		pr.mu.Lock()
		pr.message = err.Error()
		pr.mu.Unlock()
		for _, c := range pr.ctrs {
			pr.setWaiting(c, reason, err.Error())
		}
		if !pr.sleep(2 * time.Second) {
			return
		}
	}
	pr.mu.Lock()
	pr.message = ""
	pr.mu.Unlock()
	go pr.refreshLoop()
	// init containers, in order
	for _, c := range pr.ctrs {
		if !c.init {
			continue
		}
		if !pr.runContainer(c) {
			return
		}
		pr.mu.Lock()
		ok := c.status.State.Terminated != nil && c.status.State.Terminated.ExitCode == 0
		pr.mu.Unlock()
		if !ok {
			// restartPolicy Never and the init container failed: the pod failed.
			pr.mu.Lock()
			pr.phase = corev1.PodFailed
			pr.mu.Unlock()
			pr.notify()
			return
		}
	}
	pr.mu.Lock()
	pr.initialized = true
	pr.mu.Unlock()
	pr.notify()
	var wg sync.WaitGroup
	for _, c := range pr.ctrs {
		if c.init {
			continue
		}
		wg.Add(1)
		go func(c *ctr) {
			defer wg.Done()
			pr.runContainer(c)
		}(c)
	}
	wg.Wait()
}

func (pr *podRuntime) refreshLoop() {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	stateCheck := time.NewTicker(5 * time.Second)
	defer stateCheck.Stop()
	for {
		select {
		case <-pr.ctx.Done():
			return
		case <-t.C:
			pr.refreshVolumes(pr.ctx)
		case <-stateCheck.C:
			pr.restoreMissingState()
		}
	}
}

// restoreMissingState writes pod.json again when it is gone while the pod runs. The fault
// injection of the tests (hack/cluster/faults.py) finds a pod's processes through it; CI once
// saw a running operator pod without one after its node agent was restarted, for minutes, so
// that every later fault on it failed. What removed it is logged here, with what was left.
func (pr *podRuntime) restoreMissingState() {
	if _, err := os.Stat(filepath.Join(pr.dir, "pod.json")); !errors.Is(err, os.ErrNotExist) {
		return
	}
	pr.mu.Lock()
	deleting := pr.deleting
	pr.mu.Unlock()
	if deleting || pr.ctx.Err() != nil {
		return
	}
	left := "nothing"
	if entries, err := os.ReadDir(pr.dir); err == nil {
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		left = fmt.Sprintf("%v", names)
	}
	if err := os.MkdirAll(pr.dir, 0o755); err != nil {
		pr.logf("pod.json is missing and %s cannot be made again: %v", pr.dir, err)
		return
	}
	pr.logf("pod.json was missing while the pod runs (left in %s: %s): written again", pr.dir, left)
	pr.saveState()
}

// setup prepares volumes, the network namespace and /etc files.
func (pr *podRuntime) setup() error {
	pod := pr.getPod()
	if !pr.netUp {
		if pod.Spec.HostNetwork {
			pr.mu.Lock()
			pr.state.PodIP = pr.p.cfg.HostIP
			pr.state.HostNetwork = true
			pr.mu.Unlock()
		} else {
			ip, err := pr.p.ipam.Allocate(string(pod.UID))
			if err != nil {
				return err
			}
			pr.mu.Lock()
			pr.state.PodIP = ip.String()
			pr.mu.Unlock()
			pr.saveState()
			if err := SetupPodNetwork(pr.state.NetNS, pr.state.HostVeth, pr.p.cfg.Bridge, ip.String(), pr.p.cfg.Gateway); err != nil {
				return fmt.Errorf("network: %w", err)
			}
		}
		pr.netUp = true
		pr.saveState()
		pr.notify()
	}
	if err := pr.writeEtc(); err != nil {
		return err
	}
	vols, err := pr.prepareVolumes(pr.ctx)
	if err != nil {
		return err
	}
	pr.vols = vols
	return nil
}

func (pr *podRuntime) hostname() string {
	pod := pr.getPod()
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// HostsFile renders /etc/hosts as kubelet does.
func HostsFile(podIP, hostname, subdomain, namespace, domain string, aliases []corev1.HostAlias) string {
	s := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n"
	if subdomain != "" {
		s += fmt.Sprintf("%s\t%s.%s.%s.svc.%s\t%s\n", podIP, hostname, subdomain, namespace, domain, hostname)
	} else {
		s += fmt.Sprintf("%s\t%s\n", podIP, hostname)
	}
	if len(aliases) > 0 {
		s += "\n# Entries added by HostAliases.\n"
		for _, a := range aliases {
			for _, h := range a.Hostnames {
				s += fmt.Sprintf("%s\t%s\n", a.IP, h)
			}
		}
	}
	return s
}

// ResolvConf renders the pod resolv.conf for dnsPolicy ClusterFirst.
func ResolvConf(dns, namespace, domain string, cfg *corev1.PodDNSConfig) string {
	ns := []string{dns}
	search := []string{namespace + ".svc." + domain, "svc." + domain, domain}
	opts := []string{"ndots:5"}
	if cfg != nil {
		ns = append(ns, cfg.Nameservers...)
		search = append(search, cfg.Searches...)
		for _, o := range cfg.Options {
			if o.Value != nil {
				opts = append(opts, o.Name+":"+*o.Value)
			} else {
				opts = append(opts, o.Name)
			}
		}
	}
	s := ""
	for _, n := range ns {
		s += "nameserver " + n + "\n"
	}
	s += "search"
	for _, x := range search {
		s += " " + x
	}
	s += "\noptions"
	for _, o := range opts {
		s += " " + o
	}
	return s + "\n"
}

func (pr *podRuntime) writeEtc() error {
	pod := pr.getPod()
	dir := filepath.Join(pr.dir, "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	h := pr.hostname()
	hosts := HostsFile(pr.podIP(), h, pod.Spec.Subdomain, pod.Namespace, pr.p.cfg.ClusterDomain, pod.Spec.HostAliases)
	resolv := ResolvConf(pr.p.cfg.DNSServer, pod.Namespace, pr.p.cfg.ClusterDomain, pod.Spec.DNSConfig)
	if pod.Spec.DNSPolicy == corev1.DNSNone && pod.Spec.DNSConfig != nil {
		resolv = ""
		for _, n := range pod.Spec.DNSConfig.Nameservers {
			resolv += "nameserver " + n + "\n"
		}
		if len(pod.Spec.DNSConfig.Searches) > 0 {
			resolv += "search"
			for _, s := range pod.Spec.DNSConfig.Searches {
				resolv += " " + s
			}
			resolv += "\n"
		}
	}
	if pod.Spec.DNSPolicy == corev1.DNSDefault {
		if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
			resolv = string(b)
		}
	}
	files := map[string]fileData{
		"hosts":       {[]byte(hosts), 0o644},
		"resolv.conf": {[]byte(resolv), 0o644},
		"hostname":    {[]byte(h + "\n"), 0o644},
	}
	return writeFileSet(dir, files)
}

func (pr *podRuntime) restartPolicyFor(c *ctr) corev1.RestartPolicy {
	pol := pr.getPod().Spec.RestartPolicy
	if c.init && pol == corev1.RestartPolicyAlways {
		return corev1.RestartPolicyOnFailure
	}
	if pol == "" {
		return corev1.RestartPolicyAlways
	}
	return pol
}

// runContainer runs one container until it should not be restarted any
// more or the pod is being stopped. It returns false when the pod is stopping.
func (pr *podRuntime) runContainer(c *ctr) bool {
	for {
		if pr.ctx.Err() != nil {
			return false
		}
		started, exitCode := pr.startAndWait(c)
		if pr.ctx.Err() != nil {
			return false
		}
		if !started {
			// could not start (image, config): retry after a short delay
			if !pr.sleep(2 * time.Second) {
				return false
			}
			continue
		}
		pol := pr.restartPolicyFor(c)
		if pol == corev1.RestartPolicyNever || (pol == corev1.RestartPolicyOnFailure && exitCode == 0) {
			pr.notify()
			return true
		}
		pr.mu.Lock()
		ran := time.Duration(0)
		if t := c.status.State.Terminated; t != nil {
			ran = t.FinishedAt.Sub(t.StartedAt.Time)
		}
		if ran > 2*pr.p.cfg.BackoffMax {
			c.backoffN = 0
		}
		d := Backoff(pr.p.cfg.BackoffBase, pr.p.cfg.BackoffMax, c.backoffN)
		c.backoffN++
		pr.mu.Unlock()
		if d > 0 {
			pr.mu.Lock()
			last := c.status.State
			pr.mu.Unlock()
			pod := pr.getPod()
			pr.setWaiting(c, "CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				d, c.spec.Name, pod.Name, pod.Namespace, pod.UID))
			pr.mu.Lock()
			if last.Terminated != nil {
				c.status.LastTerminationState = last
			}
			pr.mu.Unlock()
			if !pr.sleep(d) {
				return false
			}
		}
	}
}

// containerEnvBase is the image env plus service env vars.
func (pr *podRuntime) containerEnvBase(img *ImageEntry) []EnvPair {
	var env []EnvPair
	env = append(env, EnvPair{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, EnvPair{"HOME", "/root"})
	if img != nil {
		for _, k := range sortedKeys(img.Env) {
			found := false
			for i := range env {
				if env[i].Name == k {
					env[i].Value = img.Env[k]
					found = true
				}
			}
			if !found {
				env = append(env, EnvPair{k, img.Env[k]})
			}
		}
	}
	if pr.getPod().Spec.HostNetwork {
		h, _ := os.Hostname()
		env = append(env, EnvPair{"HOSTNAME", h})
	} else {
		env = append(env, EnvPair{"HOSTNAME", pr.hostname()})
	}
	cfg := pr.p.cfg
	if cfg.KubernetesServiceHost != "" {
		port := strconv.Itoa(cfg.KubernetesServicePort)
		env = append(env,
			EnvPair{"KUBERNETES_SERVICE_HOST", cfg.KubernetesServiceHost},
			EnvPair{"KUBERNETES_SERVICE_PORT", port},
			EnvPair{"KUBERNETES_SERVICE_PORT_HTTPS", port},
			EnvPair{"KUBERNETES_PORT", "tcp://" + cfg.KubernetesServiceHost + ":" + port},
			EnvPair{"KUBERNETES_PORT_" + port + "_TCP", "tcp://" + cfg.KubernetesServiceHost + ":" + port},
			EnvPair{"KUBERNETES_PORT_" + port + "_TCP_PROTO", "tcp"},
			EnvPair{"KUBERNETES_PORT_" + port + "_TCP_PORT", port},
			EnvPair{"KUBERNETES_PORT_" + port + "_TCP_ADDR", cfg.KubernetesServiceHost},
		)
	}
	return env
}

// startAndWait starts one instance of the container and waits for it to exit.
// started=false means the container could not be started (status says why).
func (pr *podRuntime) startAndWait(c *ctr) (started bool, exitCode int32) {
	pod := pr.getPod()
	im, err := pr.p.images.Get()
	if err != nil {
		pr.setWaiting(c, "ErrImagePull", err.Error())
		return false, 0
	}
	img, ok := im.Lookup(c.spec.Image)
	if !ok {
		pr.setWaiting(c, "ErrImagePull", fmt.Sprintf("image %q is not in the node agent's image map %s", c.spec.Image, pr.p.images.Path))
		return false, 0
	}
	env, err := ResolveEnv(pr.ctx, EnvInput{
		Pod: pod, Container: &c.spec, PodIP: pr.podIP(), HostIP: pr.p.cfg.HostIP,
		Alloc: pr.p.allocatable(), Base: pr.containerEnvBase(img), Sources: pr.p,
	})
	if err != nil {
		pr.setWaiting(c, "CreateContainerConfigError", err.Error())
		return false, 0
	}
	argv := Argv(img, &c.spec, env)
	if len(argv) == 0 {
		pr.setWaiting(c, "CreateContainerConfigError", "no command specified (container command/args and image map entrypoint/cmd are empty)")
		return false, 0
	}
	mounts, err := pr.containerMounts(&c.spec, pr.vols, img, env)
	if err != nil {
		pr.setWaiting(c, "CreateContainerConfigError", err.Error())
		return false, 0
	}
	wd := c.spec.WorkingDir
	if wd == "" {
		wd = img.WorkingDir
	}
	cdir := filepath.Join(pr.dir, "containers", c.spec.Name)
	_ = os.MkdirAll(cdir, 0o755)
	spec := initproc.Spec{
		Scratch:    filepath.Join(cdir, "scratch"),
		Mounts:     mounts,
		Argv:       argv,
		WorkingDir: wd,
	}
	for _, e := range env {
		spec.Env = append(spec.Env, e.Name+"="+e.Value)
	}
	if !pod.Spec.HostNetwork {
		spec.NetNS = "/run/netns/" + pr.state.NetNS
		spec.Hostname = pr.hostname()
	}
	specPath := filepath.Join(cdir, "spec.json")
	data, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		pr.setWaiting(c, "RunContainerError", err.Error())
		return false, 0
	}
	pr.mu.Lock()
	restarts := c.status.RestartCount
	pr.mu.Unlock()
	logPath := pr.logPath(c.spec.Name, restarts)
	_ = os.MkdirAll(filepath.Dir(logPath), 0o755)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		pr.setWaiting(c, "RunContainerError", err.Error())
		return false, 0
	}
	cmd := exec.Command(pr.p.selfExe, "init", "--spec", specPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.Env = []string{}
	flags := uintptr(syscall.CLONE_NEWNS)
	if !pod.Spec.HostNetwork {
		flags |= syscall.CLONE_NEWUTS
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
	if err := cmd.Start(); err != nil {
		logf.Close()
		pr.setWaiting(c, "RunContainerError", err.Error())
		return false, 0
	}
	logf.Close()
	pid := cmd.Process.Pid
	id := newID()
	now := metav1.Now()
	instCtx, instCancel := context.WithCancel(pr.ctx)
	exitCh := make(chan struct{})
	pr.mu.Lock()
	c.pid = pid
	c.env = env
	c.killMsg = ""
	c.stopInst = instCancel
	c.exitCh = exitCh
	c.status.ContainerID = "qk://" + id
	c.status.Image = c.spec.Image
	c.status.ImageID = "qk-image://" + c.spec.Image
	c.status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	c.status.Ready = false
	st := c.spec.StartupProbe == nil
	c.status.Started = &st
	pr.state.Containers[c.spec.Name] = pid
	pr.state.PIDStart[c.spec.Name] = procStartTime(pid)
	pr.state.RestartCounts[c.spec.Name] = c.status.RestartCount
	pr.mu.Unlock()
	pr.saveState()
	pr.notify()
	pr.logf("container %s started pid %d (restart %d): %v", c.spec.Name, pid, restarts, argv)

	if !c.init {
		go pr.runProbes(instCtx, c, pid)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waitErr:
	case <-pr.ctx.Done():
		werr = pr.stopProcess(pid, waitErr, pr.graceDeadline)
	case <-instCtx.Done():
		if pr.ctx.Err() != nil {
			werr = pr.stopProcess(pid, waitErr, pr.graceDeadline)
		} else {
			// killed by a probe
			killAt := time.Now().Add(pr.terminationGrace())
			werr = pr.stopProcess(pid, waitErr, func() (time.Time, <-chan struct{}) { return killAt, nil })
		}
	}
	instCancel()
	close(exitCh)
	code := int32(0)
	if werr != nil {
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal())
			} else {
				code = int32(ee.ExitCode())
			}
		} else {
			code = 128
		}
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	startMsg := ""
	if code == 128 {
		// `nodeagent init` could not set up or exec the container
		if data, err := os.ReadFile(logPath); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if strings.HasPrefix(line, "nodeagent init: ") {
					reason, startMsg = "StartError", strings.TrimPrefix(line, "nodeagent init: ")
				}
			}
		}
	}
	fin := metav1.Now()
	pol := pr.restartPolicyFor(c)
	pr.mu.Lock()
	msg := c.killMsg
	if startMsg != "" {
		msg = startMsg
	}
	c.pid = 0
	c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg, StartedAt: now, FinishedAt: fin, ContainerID: "qk://" + id,
	}}
	c.status.Ready = false
	f := false
	c.status.Started = &f
	pr.state.Containers[c.spec.Name] = 0
	pr.state.PIDStart[c.spec.Name] = 0
	willRestart := pr.ctx.Err() == nil
	if pol == corev1.RestartPolicyNever || (pol == corev1.RestartPolicyOnFailure && code == 0) {
		willRestart = false
	}
	if pr.ctx.Err() != nil && !pr.deleting {
		// stopped by --kill-pods-on-exit: the next agent restarts it (+1)
		if pr.state.Killed == nil {
			pr.state.Killed = map[string]bool{}
		}
		pr.state.Killed[c.spec.Name] = true
	}
	if willRestart {
		c.status.LastTerminationState = c.status.State
		c.status.RestartCount++
		pr.state.RestartCounts[c.spec.Name] = c.status.RestartCount
	}
	pr.mu.Unlock()
	pr.saveState()
	pr.notify()
	pr.logf("container %s (pid %d) exited with code %d", c.spec.Name, pid, code)
	return true, code
}

func (pr *podRuntime) logPath(name string, restart int32) string {
	return filepath.Join(pr.dir, "logs", name, fmt.Sprintf("%d.log", restart))
}

func (pr *podRuntime) terminationGrace() time.Duration {
	pod := pr.getPod()
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// graceDeadline is when the pod's processes get SIGKILL, and a channel closed when a later
// delete moves that earlier.
func (pr *podRuntime) graceDeadline() (time.Time, <-chan struct{}) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.deadline.IsZero() {
		return time.Now(), pr.deadlineMoved
	}
	return pr.deadline, pr.deadlineMoved
}

// shortenGraceLocked moves the kill deadline of a pod earlier (never later). Called with
// pr.mu held.
func (pr *podRuntime) shortenGraceLocked(deadline time.Time) bool {
	if !pr.deadline.IsZero() && !deadline.Before(pr.deadline) {
		return false
	}
	pr.deadline = deadline
	close(pr.deadlineMoved)
	pr.deadlineMoved = make(chan struct{})
	return true
}

// stopProcess sends SIGTERM to the process group, then SIGKILL at the deadline (read again
// whenever it moves).
func (pr *podRuntime) stopProcess(pid int, waitErr chan error, deadline func() (time.Time, <-chan struct{})) error {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for {
		at, moved := deadline()
		t := time.NewTimer(max(time.Until(at), 0))
		select {
		case err := <-waitErr:
			t.Stop()
			_ = syscall.Kill(-pid, syscall.SIGKILL) // leftovers of the group
			return err
		case <-t.C:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return <-waitErr
		case <-moved:
			t.Stop()
		}
	}
}

// teardown releases the pod sandbox: network namespace, veth, IP, memory
// mounts. Volume data (emptyDir) stays until the pod is removed.
func (pr *podRuntime) teardown() {
	pr.mu.Lock()
	st := pr.state
	pr.mu.Unlock()
	if !st.HostNetwork {
		TeardownPodNetwork(st.NetNS, st.HostVeth)
	}
	pr.mu.Lock()
	pr.netUp = false
	if pr.deleting {
		pr.phase = pr.finalPhaseLocked()
	} else if p := pr.computePhaseLocked(); p == corev1.PodSucceeded || p == corev1.PodFailed {
		pr.phase = p
	}
	pr.mu.Unlock()
}

// removeAll deletes everything of the pod (called after deletion).
func (pr *podRuntime) removeAll() {
	pr.mu.Lock()
	st := pr.state
	pr.mu.Unlock()
	for _, m := range st.MemoryMounts {
		_, _ = run("umount", "-l", m)
	}
	_ = pr.p.ipam.Release(st.UID)
	if err := os.RemoveAll(pr.dir); err != nil {
		pr.logf("remove %s: %v", pr.dir, err)
	}
}
