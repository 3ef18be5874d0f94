package agent

import "time"

// Backoff computes the crash-loop delay: base * 2^(restarts-1), capped at max.
// restarts is the number of restarts already performed (0 -> no delay).
func Backoff(base, max time.Duration, restarts int) time.Duration {
	if restarts <= 0 {
		return 0
	}
	d := base
	for i := 1; i < restarts; i++ {
		d *= 2
		if d >= max {
			return max
		}
	}
	if d > max {
		return max
	}
	return d
}
