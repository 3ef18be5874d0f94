//go:build tools

// Prometheus and promtool for the alert rules' unit tests and the observability e2e, with
// Kubernetes service discovery only (the build tags below drop the other discoveries).
package toolchain

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
