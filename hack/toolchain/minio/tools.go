//go:build tools

// Package toolchain pins MinIO, the S3-compatible object store the tests and `make object-stores`
// run in the local cluster. MinIO publishes no semantic versions on the module proxy, so the pin is
// a pseudo-version (a commit).
package toolchain

import _ "github.com/minio/minio"
