//go:build tools

// Package tools pins the etcd server that the test harness runs. Its sibling
// modules are pinned to the same version so the build matches the release.
package tools

import (
	_ "go.etcd.io/etcd/api/v3/version"
	_ "go.etcd.io/etcd/client/pkg/v3/types"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/pkg/v3/osutil"
	_ "go.etcd.io/etcd/server/v3"
)
