//go:build tools

// Package toolchain pins CoreDNS, the cluster DNS of the local Kubernetes.
package toolchain

import _ "github.com/coredns/coredns"
