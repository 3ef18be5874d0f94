//go:build tools

// Package toolchain pins opm, which renders bundle/ into the file-based catalog OLM installs from.
package toolchain

import _ "github.com/operator-framework/operator-registry/cmd/opm"
