// The Prometheus operator's CRDs (PodMonitor, PrometheusRule, ServiceMonitor), copied out of
// its module for the tests of spec.monitoring; nothing is built from it.
module quorumkeeper.dev/toolchain/prometheus-operator

go 1.26.7

require github.com/prometheus-operator/prometheus-operator v0.85.0
