package agent

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A running pod whose pod.json (or whole directory) is removed under it writes it again, with
// the pids the fault injection needs; a pod being deleted does not.
func TestMissingStateOfARunningPodIsWrittenAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods", "ns_op_uid1")
	p := &Provider{logger: log.New(os.Stderr, "", 0)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := &podRuntime{
		p: p, dir: dir, ctx: ctx, cancel: cancel,
		pod:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "op", UID: "uid1"}},
		state: &PodState{Namespace: "ns", Name: "op", UID: "uid1", Containers: map[string]int{"manager": 4242}},
	}
	pr.restoreMissingState()
	st, err := LoadState(dir)
	if err != nil || st.Containers["manager"] != 4242 || st.UID != "uid1" {
		t.Fatalf("pod.json not written again: %v %+v", err, st)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	pr.deleting = true
	pr.restoreMissingState()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the state of a pod being deleted was written again (%v)", err)
	}
}
