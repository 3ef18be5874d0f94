//go:build tools

// Package toolchain pins the etcd 3.6 patch release before etcd-v3.6's, so that the operator's
// rolling upgrade is tested across a patch version in both directions.
package toolchain

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
