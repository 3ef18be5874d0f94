package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func probeTimeout(p *corev1.Probe) time.Duration {
	if p.TimeoutSeconds > 0 {
		return time.Duration(p.TimeoutSeconds) * time.Second
	}
	return time.Second
}

func probePeriod(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds > 0 {
		return time.Duration(p.PeriodSeconds) * time.Second
	}
	return 10 * time.Second
}

func thresholds(p *corev1.Probe) (succ, fail int) {
	succ, fail = int(p.SuccessThreshold), int(p.FailureThreshold)
	if succ <= 0 {
		succ = 1
	}
	if fail <= 0 {
		fail = 3
	}
	return
}

func resolvePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("named port %q not found", port.StrVal)
}

// probeOnce runs one probe attempt; nil means success.
func (pr *podRuntime) probeOnce(ctx context.Context, c *ctr, pid int, p *corev1.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout(p))
	defer cancel()
	ip := pr.podIP()
	switch {
	case p.Exec != nil:
		pr.mu.Lock()
		env := c.env
		pr.mu.Unlock()
		out, code, err := nsenterRun(ctx, pid, p.Exec.Command, env)
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("exec probe exit code %d: %s", code, strings.TrimSpace(string(out)))
		}
		return nil
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := resolvePort(&c.spec, g.Port)
		if err != nil {
			return err
		}
		host := g.Host
		if host == "" {
			host = ip
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "kube-probe/1.35")
		for _, h := range g.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := resolvePort(&c.spec, p.TCPSocket.Port)
		if err != nil {
			return err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = ip
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		conn.Close()
		return nil
	case p.GRPC != nil:
		return fmt.Errorf("grpc probes are not supported by the qk node agent")
	}
	return fmt.Errorf("probe has no handler")
}

// nsenterArgs enters every namespace and the root/cwd of pid.
func nsenterArgs(pid int, cmd []string) []string {
	return append([]string{"-t", strconv.Itoa(pid), "-m", "-n", "-u", "-r", "-w", "--"}, cmd...)
}

func nsenterRun(ctx context.Context, pid int, command []string, env []EnvPair) ([]byte, int, error) {
	cmd := exec.CommandContext(ctx, "nsenter", nsenterArgs(pid, command)...)
	cmd.Env = envList(env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if ctx.Err() != nil {
				return out, -1, fmt.Errorf("probe timed out")
			}
			return out, ee.ExitCode(), nil
		}
		return out, -1, err
	}
	return out, 0, nil
}

func envList(env []EnvPair) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

func (pr *podRuntime) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (pr *podRuntime) killInstance(c *ctr, msg string) {
	pr.mu.Lock()
	c.killMsg = msg
	stop := c.stopInst
	pr.mu.Unlock()
	pr.logf("container %s: %s, killing it", c.spec.Name, msg)
	if stop != nil {
		stop()
	}
}

// runProbes drives startup, liveness and readiness probes for one container instance.
func (pr *podRuntime) runProbes(ctx context.Context, c *ctr, pid int) {
	start := time.Now()
	setReady := func(v bool) {
		pr.mu.Lock()
		changed := c.status.Ready != v
		if c.status.State.Running == nil {
			v = false
			changed = false
		}
		c.status.Ready = v
		pr.mu.Unlock()
		if changed {
			pr.notify()
		}
	}
	if sp := c.spec.StartupProbe; sp != nil {
		if !pr.sleepCtx(ctx, time.Duration(sp.InitialDelaySeconds)*time.Second) {
			return
		}
		succT, failT := thresholds(sp)
		_ = succT
		fails := 0
		for {
			if err := pr.probeOnce(ctx, c, pid, sp); err == nil {
				break
			} else if ctx.Err() != nil {
				return
			} else {
				fails++
				if fails >= failT {
					pr.killInstance(c, "Startup probe failed: "+err.Error())
					return
				}
			}
			if !pr.sleepCtx(ctx, probePeriod(sp)) {
				return
			}
		}
		pr.mu.Lock()
		t := true
		c.status.Started = &t
		pr.mu.Unlock()
		pr.notify()
	}
	startedAt := time.Now()
	if lp := c.spec.LivenessProbe; lp != nil {
		go func() {
			delay := time.Duration(lp.InitialDelaySeconds)*time.Second - time.Since(start)
			if c.spec.StartupProbe != nil {
				delay = time.Duration(lp.InitialDelaySeconds)*time.Second - time.Since(startedAt)
			}
			if delay > 0 && !pr.sleepCtx(ctx, delay) {
				return
			}
			_, failT := thresholds(lp)
			fails := 0
			for {
				err := pr.probeOnce(ctx, c, pid, lp)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					fails++
					if fails >= failT {
						pr.killInstance(c, "Liveness probe failed: "+err.Error())
						return
					}
				} else {
					fails = 0
				}
				if !pr.sleepCtx(ctx, probePeriod(lp)) {
					return
				}
			}
		}()
	}
	rp := c.spec.ReadinessProbe
	if rp == nil {
		setReady(true)
		return
	}
	delay := time.Duration(rp.InitialDelaySeconds)*time.Second - time.Since(start)
	if delay > 0 && !pr.sleepCtx(ctx, delay) {
		return
	}
	succT, failT := thresholds(rp)
	succ, fails := 0, 0
	ready := false
	for {
		err := pr.probeOnce(ctx, c, pid, rp)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			succ++
			fails = 0
			if !ready && succ >= succT {
				ready = true
				setReady(true)
			}
		} else {
			fails++
			succ = 0
			if ready && fails >= failT {
				ready = false
				setReady(false)
			}
		}
		if !pr.sleepCtx(ctx, probePeriod(rp)) {
			return
		}
	}
}
