package agent

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A pod deleted again with a shorter grace period is killed at the earlier deadline, as the
// kubelet does: a process that ignores SIGTERM does not keep it for the first grace period.
func TestShortenedGraceKillsAtTheEarlierDeadline(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 60`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	pr := &podRuntime{deadline: time.Now().Add(30 * time.Second), deadlineMoved: make(chan struct{})}
	stopped := make(chan error, 1)
	go func() { stopped <- pr.stopProcess(cmd.Process.Pid, waitErr, pr.graceDeadline) }()

	time.Sleep(200 * time.Millisecond)
	pr.mu.Lock()
	if pr.shortenGraceLocked(time.Now().Add(time.Hour)) {
		t.Error("a later deadline must not replace an earlier one")
	}
	if !pr.shortenGraceLocked(time.Now()) {
		t.Error("an earlier deadline must replace the first one")
	}
	pr.mu.Unlock()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the process was not killed at the shortened deadline")
	}
}
