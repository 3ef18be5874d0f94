package agent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// computePhaseLocked follows kubelet's getPhase. pr.mu must be held.
func (pr *podRuntime) computePhaseLocked() corev1.PodPhase {
	if pr.phase == corev1.PodFailed || pr.phase == corev1.PodSucceeded {
		return pr.phase
	}
	if !pr.initialized {
		return corev1.PodPending
	}
	var running, waiting, stopped, succeeded, total int
	for _, c := range pr.ctrs {
		if c.init {
			continue
		}
		total++
		s := c.status.State
		switch {
		case s.Running != nil:
			running++
		case s.Terminated != nil:
			stopped++
			if s.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.Waiting != nil:
			if c.status.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped == total && total > 0:
		pol := pr.pod.Spec.RestartPolicy
		if pol == corev1.RestartPolicyAlways || pol == "" {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if pol == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		// OnFailure: failed containers will be restarted
		for _, c := range pr.ctrs {
			if !c.init && c.status.State.Terminated != nil && c.status.State.Terminated.ExitCode != 0 {
				return corev1.PodRunning
			}
		}
		return corev1.PodSucceeded
	}
	return corev1.PodPending
}

// finalPhaseLocked is the phase of a pod stopped because it was deleted.
func (pr *podRuntime) finalPhaseLocked() corev1.PodPhase {
	if pr.phase == corev1.PodFailed || pr.phase == corev1.PodSucceeded {
		return pr.phase
	}
	for _, c := range pr.ctrs {
		if t := c.status.State.Terminated; t != nil && t.ExitCode != 0 && !c.init {
			return corev1.PodFailed
		}
	}
	return corev1.PodSucceeded
}

func (pr *podRuntime) condLocked(t corev1.PodConditionType, v bool, reason string) corev1.PodCondition {
	s := corev1.ConditionFalse
	if v {
		s = corev1.ConditionTrue
	}
	if pr.condVals[t] != s {
		pr.condVals[t] = s
		pr.condTimes[t] = metav1.Now()
	}
	c := corev1.PodCondition{Type: t, Status: s, LastTransitionTime: pr.condTimes[t]}
	if !v {
		c.Reason = reason
	}
	return c
}

// podWithStatus returns a copy of the pod carrying the current status.
func (pr *podRuntime) podWithStatus() *corev1.Pod {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pod := pr.pod.DeepCopy()
	phase := pr.computePhaseLocked()
	st := corev1.PodStatus{
		Phase:     phase,
		HostIP:    pr.p.cfg.HostIP,
		HostIPs:   []corev1.HostIP{{IP: pr.p.cfg.HostIP}},
		StartTime: &pr.startTime,
		QOSClass:  pr.pod.Status.QOSClass,
		Message:   pr.message,
		Reason:    pr.reason,
	}
	if pr.state.PodIP != "" {
		st.PodIP = pr.state.PodIP
		st.PodIPs = []corev1.PodIP{{IP: pr.state.PodIP}}
	}
	allReady := true
	nApp := 0
	for _, c := range pr.ctrs {
		cs := *c.status.DeepCopy()
		if c.init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			continue
		}
		nApp++
		if !cs.Ready {
			allReady = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	ready := allReady && nApp > 0 && !terminal
	reasonNR := "ContainersNotReady"
	st.Conditions = []corev1.PodCondition{
		pr.condLocked(corev1.PodReadyToStartContainers, pr.netUp, ""),
		pr.condLocked(corev1.PodInitialized, pr.initialized, "ContainersNotInitialized"),
		pr.condLocked(corev1.PodReady, ready, reasonNR),
		pr.condLocked(corev1.ContainersReady, ready, reasonNR),
		pr.condLocked(corev1.PodScheduled, true, ""),
	}
	if terminal {
		st.Conditions[2].Reason = "PodCompleted"
		st.Conditions[3].Reason = "PodCompleted"
	}
	pod.Status = st
	return pod
}
