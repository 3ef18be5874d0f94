package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PodState is persisted as <state-dir>/pods/<ns>_<name>_<uid>/pod.json.
// The fault injection CLI (hack/cluster/faults.py) reads it.
type PodState struct {
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	UID           string            `json:"uid"`
	NetNS         string            `json:"netns"`
	HostVeth      string            `json:"hostVeth"`
	PodIP         string            `json:"podIP"`
	HostNetwork   bool              `json:"hostNetwork"`
	Containers    map[string]int    `json:"containers"`    // name -> pid (0 = not running)
	PIDStart      map[string]uint64 `json:"pidStart"`      // name -> /proc/<pid>/stat starttime
	RestartCounts map[string]int32  `json:"restartCounts"` // name -> restart count
	MemoryMounts  []string          `json:"memoryMounts,omitempty"`
	// Killed lists containers whose process an agent restart killed: their
	// restart count goes up by one when the pod is started again.
	Killed    map[string]bool `json:"killed,omitempty"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// PodDirName is the state directory name of a pod.
func PodDirName(ns, name, uid string) string { return ns + "_" + name + "_" + uid }

// SaveState writes pod.json atomically.
func SaveState(dir string, s *PodState) error {
	s.UpdatedAt = time.Now().UTC()
	data, _ := json.MarshalIndent(s, "", "  ")
	tmp := filepath.Join(dir, ".pod.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "pod.json"))
}

// LoadState reads pod.json.
func LoadState(dir string) (*PodState, error) {
	data, err := os.ReadFile(filepath.Join(dir, "pod.json"))
	if err != nil {
		return nil, err
	}
	s := &PodState{}
	return s, json.Unmarshal(data, s)
}

// procStartTime returns field 22 of /proc/<pid>/stat (0 when gone or a zombie).
func procStartTime(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndex(s, ")")
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// killLeftover SIGKILLs the process group of pid if it is still the same process.
func killLeftover(pid int, start uint64) {
	if pid <= 0 {
		return
	}
	st := procStartTime(pid)
	if st == 0 || (start != 0 && st != start) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 50 && procStartTime(pid) != 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}
