//go:build tools

// Package toolchain pins the ansible-operator engine that runs this project's watches.yaml.
package toolchain

import _ "github.com/operator-framework/ansible-operator-plugins/cmd/ansible-operator"
