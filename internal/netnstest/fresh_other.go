//go:build !linux

package netnstest

import "testing"

// InFreshNetns skips: network namespaces are Linux's.
func InFreshNetns(tb testing.TB, f func()) {
	tb.Helper()
	tb.Skip("network namespaces need Linux")
}
