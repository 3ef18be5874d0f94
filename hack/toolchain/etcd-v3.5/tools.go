//go:build tools

// Package toolchain pins one etcd release (server, etcdctl, etcdutl) for the operator's tests.
package toolchain

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
