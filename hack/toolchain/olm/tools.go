//go:build tools

// Package toolchain pins OLM v0's olm and catalog operators, which the local cluster runs as host
// processes to install this operator from its bundle.
package toolchain

import (
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/catalog"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/olm"
)
