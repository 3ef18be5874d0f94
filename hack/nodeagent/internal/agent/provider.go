package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"
)

// Config is the node agent configuration (from `nodeagent run` flags).
type Config struct {
	NodeName              string
	PodCIDR               string
	Bridge                string
	Gateway               string
	DNSServer             string
	ClusterDomain         string
	ImageMap              string
	StateDir              string
	ListenAddress         string
	HostIP                string
	KubernetesServiceHost string
	KubernetesServicePort int
	CPU                   string
	Memory                string
	MaxPods               int
	BackoffBase           time.Duration
	BackoffMax            time.Duration
	KillPodsOnExit        bool
}

// Provider implements the virtual-kubelet provider interfaces.
type Provider struct {
	cfg     Config
	client  kubernetes.Interface
	ipam    *IPAM
	images  *ImageMapFile
	selfExe string
	logger  *log.Logger

	mu       sync.Mutex
	pods     map[string]*podRuntime // ns/name
	notifyFn func(*corev1.Pod)
	pending  []*corev1.Pod
}

// NewProvider creates the provider; it does not start anything.
func NewProvider(cfg Config, client kubernetes.Interface) (*Provider, error) {
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "pods"), 0o755); err != nil {
		return nil, err
	}
	ipam, err := NewIPAM(filepath.Join(cfg.StateDir, "ipam.json"), cfg.PodCIDR)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Provider{
		cfg: cfg, client: client, ipam: ipam, images: &ImageMapFile{Path: cfg.ImageMap},
		selfExe: exe, logger: log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds),
		pods: map[string]*podRuntime{},
	}, nil
}

func (p *Provider) logf(format string, a ...any) { p.logger.Printf(format, a...) }

func (p *Provider) allocatable() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(p.cfg.CPU),
		corev1.ResourceMemory: resource.MustParse(p.cfg.Memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(p.cfg.MaxPods), resource.DecimalSI),
		"ephemeral-storage":   resource.MustParse("100Gi"),
	}
}

// GetSecret implements EnvSources.
func (p *Provider) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return p.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

// GetConfigMap implements EnvSources.
func (p *Provider) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return p.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (p *Provider) notify(pod *corev1.Pod) {
	p.mu.Lock()
	fn := p.notifyFn
	p.mu.Unlock()
	if fn != nil {
		fn(pod)
	}
}

// NotifyPods implements node.PodNotifier.
func (p *Provider) NotifyPods(_ context.Context, fn func(*corev1.Pod)) {
	p.mu.Lock()
	p.notifyFn = fn
	p.mu.Unlock()
}

func key(ns, name string) string { return ns + "/" + name }

// CreatePod implements node.PodLifecycleHandler. It returns at once; the pod
// is started asynchronously and its status pushed through the notifier.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	k := key(pod.Namespace, pod.Name)
	for {
		p.mu.Lock()
		old, ok := p.pods[k]
		if !ok {
			break // p.mu stays locked
		}
		if old.getPod().UID == pod.UID {
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		// an earlier pod of the same name (a StatefulSet replacement): it has to
		// be gone before the new one starts
		if err := p.replaceOld(ctx, k, old); err != nil {
			return err
		}
	}
	defer p.mu.Unlock()
	pod = pod.DeepCopy()
	uid := string(pod.UID)
	dir := filepath.Join(p.cfg.StateDir, "pods", PodDirName(pod.Namespace, pod.Name, uid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	st, err := LoadState(dir)
	if err != nil || st.UID != uid {
		st = &PodState{}
	}
	st.Namespace, st.Name, st.UID = pod.Namespace, pod.Name, uid
	st.HostNetwork = pod.Spec.HostNetwork
	if !pod.Spec.HostNetwork {
		st.NetNS, st.HostVeth = NetNSName(uid), HostVethName(uid)
	}
	prevCounts, killed := st.RestartCounts, st.Killed
	st.Killed = nil
	st.Containers, st.PIDStart, st.RestartCounts = map[string]int{}, map[string]uint64{}, map[string]int32{}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &podRuntime{
		p: p, pod: pod, dir: dir, state: st, tokens: map[string]*tokenCache{},
		ctx: ctx, cancel: cancel, phase: corev1.PodPending, startTime: metav1.Now(),
		condTimes: map[corev1.PodConditionType]metav1.Time{}, condVals: map[corev1.PodConditionType]corev1.ConditionStatus{},
		notifyCh: make(chan struct{}, 1), done: make(chan struct{}), removed: make(chan struct{}),
		deadlineMoved: make(chan struct{}),
	}
	if pod.Status.StartTime != nil {
		pr.startTime = *pod.Status.StartTime
	}
	add := func(c corev1.Container, init bool) {
		f := false
		cc := &ctr{spec: c, init: init}
		cc.status = corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: &f,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		}
		if init {
			cc.status.State.Waiting.Reason = "PodInitializing"
		}
		// report an unknown image from the very first status on
		if im, err := p.images.Get(); err == nil {
			if _, ok := im.Lookup(c.Image); !ok {
				cc.status.State.Waiting.Reason = "ErrImagePull"
				cc.status.State.Waiting.Message = fmt.Sprintf("image %q is not in the node agent's image map %s", c.Image, p.images.Path)
			}
		}
		cc.status.RestartCount = prevCounts[c.Name]
		if killed[c.Name] {
			// the agent restarted and killed the previous instance: count it as a restart
			cc.status.RestartCount++
		}
		st.RestartCounts[c.Name] = cc.status.RestartCount
		pr.ctrs = append(pr.ctrs, cc)
	}
	for _, c := range pod.Spec.InitContainers {
		add(c, true)
	}
	for _, c := range pod.Spec.Containers {
		add(c, false)
	}
	if err := SaveState(dir, st); err != nil {
		return err
	}
	p.pods[k] = pr
	go pr.notifier()
	go pr.run()
	p.logf("pod %s created (uid %s)", k, uid)
	return nil
}

// replaceOld stops (if needed) and waits for the removal of an older pod
// with the same name.
func (p *Provider) replaceOld(ctx context.Context, k string, old *podRuntime) error {
	old.mu.Lock()
	deleting := old.deleting
	oldPod := old.pod
	old.mu.Unlock()
	if !deleting {
		p.logf("pod %s: replaced by a pod with another uid, stopping uid %s", k, oldPod.UID)
		_ = p.DeletePod(ctx, oldPod)
	}
	select {
	case <-old.removed:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pod %s: the previous pod of that name (uid %s) is still terminating", k, oldPod.UID)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// UpdatePod implements node.PodLifecycleHandler (labels/annotations only).
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	pr, ok := p.pods[key(pod.Namespace, pod.Name)]
	p.mu.Unlock()
	if !ok {
		return errdefs.NotFound("pod not found")
	}
	if pr.getPod().UID != pod.UID {
		return p.CreatePod(ctx, pod)
	}
	pr.mu.Lock()
	np := pod.DeepCopy()
	np.Status = pr.pod.Status
	pr.pod = np
	pr.mu.Unlock()
	pr.notify()
	return nil
}

// DeletePod implements node.PodLifecycleHandler: starts graceful termination
// (SIGTERM, SIGKILL at the deadline) and returns; the terminal status is
// pushed through the notifier once everything stopped.
func (p *Provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	k := key(pod.Namespace, pod.Name)
	p.mu.Lock()
	pr, ok := p.pods[k]
	p.mu.Unlock()
	if !ok || pr.getPod().UID != pod.UID {
		// a pod we did not start in this run (e.g. a completed pod from before an
		// agent restart): drop what is left of it
		dir := filepath.Join(p.cfg.StateDir, "pods", PodDirName(pod.Namespace, pod.Name, string(pod.UID)))
		p.removeStale(dir, string(pod.UID))
		return errdefs.NotFound("pod not found")
	}
	pr.mu.Lock()
	if !pr.deleting {
		pr.deleting = true
		grace := int64(30)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		} else if pod.Spec.TerminationGracePeriodSeconds != nil {
			grace = *pod.Spec.TerminationGracePeriodSeconds
		}
		pr.deadline = time.Now().Add(time.Duration(grace) * time.Second)
		if pod.DeletionTimestamp != nil && pod.DeletionTimestamp.Time.Before(pr.deadline) {
			pr.deadline = pod.DeletionTimestamp.Time
		}
		pr.mu.Unlock()
		p.logf("pod %s: deleting (grace until %s)", k, pr.deadline.Format(time.RFC3339))
		pr.cancel()
		go func() {
			<-pr.done
			pr.removeAll()
			// Like kubelet's status manager: once everything stopped, finish the
			// deletion in the API (the final status went out through the notifier).
			time.Sleep(300 * time.Millisecond)
			zero := int64(0)
			uid := pod.UID
			err := p.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name,
				metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				p.logf("pod %s: final delete: %v", k, err)
			}
			p.mu.Lock()
			if p.pods[k] == pr {
				delete(p.pods, k)
			}
			p.mu.Unlock()
			close(pr.removed)
			p.logf("pod %s: deleted", k)
		}()
		return nil
	}
	// Deleted again with a shorter grace period (the API server moves deletionTimestamp
	// earlier): like the kubelet, kill at the earlier deadline.
	if pod.DeletionTimestamp != nil && pr.shortenGraceLocked(pod.DeletionTimestamp.Time) {
		p.logf("pod %s: grace shortened (until %s)", k, pr.deadline.Format(time.RFC3339))
	}
	pr.mu.Unlock()
	return nil
}

// GetPod implements node.PodLifecycleHandler.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	pr, ok := p.pods[key(namespace, name)]
	p.mu.Unlock()
	if !ok {
		return nil, errdefs.NotFound("pod not found")
	}
	return pr.podWithStatus(), nil
}

// GetPodStatus implements node.PodLifecycleHandler.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods implements node.PodLifecycleHandler.
func (p *Provider) GetPods(_ context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	prs := make([]*podRuntime, 0, len(p.pods))
	for _, pr := range p.pods {
		prs = append(prs, pr)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(prs))
	for _, pr := range prs {
		out = append(out, pr.podWithStatus())
	}
	return out, nil
}

func (p *Provider) findCtr(namespace, podName, container string) (*podRuntime, *ctr, error) {
	p.mu.Lock()
	pr, ok := p.pods[key(namespace, podName)]
	p.mu.Unlock()
	if !ok {
		return nil, nil, errdefs.NotFound(fmt.Sprintf("pod %s/%s not found on this node", namespace, podName))
	}
	for _, c := range pr.ctrs {
		if c.spec.Name == container || (container == "" && !c.init) {
			return pr, c, nil
		}
	}
	return nil, nil, errdefs.NotFound(fmt.Sprintf("container %q not found in pod %s/%s", container, namespace, podName))
}

// GetContainerLogs implements the logs endpoint (tail, previous, limitBytes, follow).
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	pr, c, err := p.findCtr(namespace, podName, containerName)
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	n := c.status.RestartCount
	running := c.status.State.Running != nil
	exitCh := c.exitCh
	pr.mu.Unlock()
	if opts.Previous {
		if n == 0 {
			return nil, errdefs.InvalidInput(fmt.Sprintf("previous terminated container %q in pod %q not found", c.spec.Name, podName))
		}
		n--
		running = false
	}
	path := pr.logPath(c.spec.Name, n)
	if _, err := os.Stat(path); err != nil && !running && !opts.Previous && n > 0 {
		// back-off between two instances: show the last one, like kubelet
		path = pr.logPath(c.spec.Name, n-1)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, err
	}
	if opts.Tail > 0 {
		data = tailLines(data, opts.Tail)
	} else if opts.Tail == 0 && tailRequested(opts) {
		data = nil
	}
	if opts.LimitBytes > 0 && len(data) > opts.LimitBytes {
		data = data[:opts.LimitBytes]
	}
	if !opts.Follow || !running {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	// follow: stream new bytes until the instance exits or the client goes away
	pipeR, pipeW := io.Pipe()
	go func() {
		defer pipeW.Close()
		if _, err := pipeW.Write(data); err != nil {
			return
		}
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		off, _ := f.Seek(0, io.SeekEnd)
		_ = off
		buf := make([]byte, 32*1024)
		for {
			nr, _ := f.Read(buf)
			if nr > 0 {
				if _, err := pipeW.Write(buf[:nr]); err != nil {
					return
				}
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-exitCh:
				for {
					nr, _ := f.Read(buf)
					if nr <= 0 {
						return
					}
					_, _ = pipeW.Write(buf[:nr])
				}
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return pipeR, nil
}

// tailRequested is false: VK maps an absent tailLines to 0.
func tailRequested(api.ContainerLogOpts) bool { return false }

func tailLines(data []byte, n int) []byte {
	if n <= 0 {
		return data
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	count := 0
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			count++
			if count == n {
				return data[i+1:]
			}
		}
	}
	return data
}

// RunInContainer implements exec: nsenter into the container's namespaces and root.
func (p *Provider) RunInContainer(ctx context.Context, namespace, podName, containerName string, cmd []string, attach api.AttachIO) error {
	pr, c, err := p.findCtr(namespace, podName, containerName)
	if err != nil {
		return err
	}
	pr.mu.Lock()
	pid := c.pid
	env := c.env
	pr.mu.Unlock()
	if pid == 0 {
		return errdefs.InvalidInput(fmt.Sprintf("container %q is not running", c.spec.Name))
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("no command given")
	}
	ec := exec.CommandContext(ctx, "nsenter", nsenterArgs(pid, cmd)...)
	ec.Env = envList(env)
	if attach.TTY() {
		return runWithTTY(ec, attach)
	}
	if in := attach.Stdin(); in != nil {
		ec.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		ec.Stdout = out
		defer out.Close()
	}
	if e := attach.Stderr(); e != nil {
		ec.Stderr = e
		defer e.Close()
	}
	ec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = ec.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", ee.ExitCode()), Code: ee.ExitCode()}
	}
	return err
}

// runWithTTY runs an exec session on a pseudo terminal.
func runWithTTY(ec *exec.Cmd, attach api.AttachIO) error {
	if ec.Env != nil {
		hasTerm := false
		for _, e := range ec.Env {
			if strings.HasPrefix(e, "TERM=") {
				hasTerm = true
			}
		}
		if !hasTerm {
			ec.Env = append(ec.Env, "TERM=xterm")
		}
	}
	ptmx, err := pty.Start(ec)
	if err != nil {
		return err
	}
	defer ptmx.Close()
	go func() {
		for sz := range attach.Resize() {
			_ = pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Height, Cols: sz.Width})
		}
	}()
	if in := attach.Stdin(); in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	done := make(chan struct{})
	if out := attach.Stdout(); out != nil {
		go func() {
			_, _ = io.Copy(out, ptmx)
			close(done)
		}()
	} else {
		close(done)
	}
	err = ec.Wait()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
	}
	if out := attach.Stdout(); out != nil {
		out.Close()
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", ee.ExitCode()), Code: ee.ExitCode()}
	}
	return err
}

// AttachToContainer is not supported (container output goes to log files).
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("attach is not supported by the qk node agent; use kubectl logs -f")
}

// GetStatsSummary returns a minimal summary.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.cfg.NodeName, StartTime: metav1.Now()}}, nil
}

// GetMetricsResource returns no metrics.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// PortForward is not supported.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errdefs.InvalidInput("port-forward is not supported by the qk node agent; pod IPs are reachable from the host")
}

// CleanupLeftovers kills container processes and tears down the sandboxes
// of an earlier run of this node. State of pods that still exist in the API
// (restart counts, IP, emptyDir data) is kept; everything else is removed.
func (p *Provider) CleanupLeftovers(ctx context.Context) error {
	live := map[string]bool{}
	terminating := map[string]corev1.Pod{}
	list, err := p.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.cfg.NodeName})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil {
			live[string(pod.UID)] = true
		} else {
			terminating[string(pod.UID)] = pod
		}
	}
	// Pods deleted while the agent was down: their processes are killed below,
	// so finish their deletion in the API (like kubelet after termination).
	defer func() {
		for uid, pod := range terminating {
			zero := int64(0)
			u := pod.UID
			err := p.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
				metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &u}})
			if err == nil {
				p.logf("pod %s/%s (uid %s) was deleted while the agent was down: removed", pod.Namespace, pod.Name, uid)
			}
		}
	}()
	entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, "pods"))
	for _, e := range entries {
		dir := filepath.Join(p.cfg.StateDir, "pods", e.Name())
		st, err := LoadState(dir)
		if err != nil {
			p.logf("leftover %s: unreadable state (%v), removing", dir, err)
			_ = os.RemoveAll(dir)
			continue
		}
		for name, pid := range st.Containers {
			if pid > 0 {
				if st.Killed == nil {
					st.Killed = map[string]bool{}
				}
				st.Killed[name] = true
				p.logf("leftover %s/%s: killing container %s (pid %d)", st.Namespace, st.Name, name, pid)
				killLeftover(pid, st.PIDStart[name])
			}
			st.Containers[name] = 0
		}
		if !st.HostNetwork {
			TeardownPodNetwork(st.NetNS, st.HostVeth)
		}
		if live[st.UID] {
			_ = SaveState(dir, st)
			continue
		}
		for _, m := range st.MemoryMounts {
			_, _ = run("umount", "-l", m)
		}
		_ = p.ipam.Release(st.UID)
		_ = os.RemoveAll(dir)
		p.logf("leftover %s/%s removed", st.Namespace, st.Name)
	}
	for owner := range p.ipam.Owners() {
		if !live[owner] {
			_ = p.ipam.Release(owner)
		}
	}
	return nil
}

// KillAll stops every pod immediately (run --kill-pods-on-exit).
func (p *Provider) KillAll() {
	p.mu.Lock()
	prs := []*podRuntime{}
	for _, pr := range p.pods {
		prs = append(prs, pr)
	}
	p.mu.Unlock()
	for _, pr := range prs {
		pr.mu.Lock()
		pr.shortenGraceLocked(time.Now())
		pr.mu.Unlock()
		pr.cancel()
	}
	for _, pr := range prs {
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
		}
	}
}

// removeStale removes the state (processes, sandbox, IP, directory) of a pod
// that this agent process does not run.
func (p *Provider) removeStale(dir, uid string) {
	st, err := LoadState(dir)
	if err != nil || (uid != "" && st.UID != uid) {
		return
	}
	for name, pid := range st.Containers {
		killLeftover(pid, st.PIDStart[name])
	}
	if !st.HostNetwork {
		TeardownPodNetwork(st.NetNS, st.HostVeth)
	}
	for _, m := range st.MemoryMounts {
		_, _ = run("umount", "-l", m)
	}
	_ = p.ipam.Release(st.UID)
	_ = os.RemoveAll(dir)
	p.logf("pod %s/%s: removed the state of a pod that is gone", st.Namespace, st.Name)
}

// GCLoop removes state directories of pods that no longer exist in the API
// and are not run by this process (e.g. completed pods from before an agent
// restart, which virtual-kubelet deletes without calling DeletePod).
func (p *Provider) GCLoop(ctx context.Context, pods corev1listers.PodLister) {
	t := time.NewTicker(20 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		active := map[string]bool{}
		p.mu.Lock()
		for _, pr := range p.pods {
			active[pr.dir] = true
		}
		p.mu.Unlock()
		entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, "pods"))
		for _, e := range entries {
			dir := filepath.Join(p.cfg.StateDir, "pods", e.Name())
			if active[dir] {
				continue
			}
			st, err := LoadState(dir)
			if err != nil {
				continue
			}
			if pod, err := pods.Pods(st.Namespace).Get(st.Name); err == nil && string(pod.UID) == st.UID {
				continue
			} else if err != nil && !apierrors.IsNotFound(err) {
				continue
			}
			p.removeStale(dir, st.UID)
		}
	}
}
