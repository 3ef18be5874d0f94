//go:build tools

// Package toolchain pins operator-sdk, which generates bundle/ from config/ and validates it.
package toolchain

import _ "github.com/operator-framework/operator-sdk/cmd/operator-sdk"
