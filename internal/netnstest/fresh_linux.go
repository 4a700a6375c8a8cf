//go:build linux

package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InFreshNetns runs f on the calling goroutine's thread, locked and moved
// into a network namespace made for it and destroyed afterwards: the
// simplest stand of the kernel tests that need no topology. It skips the
// test unless root. If the thread cannot be moved back it stays locked, so
// the runtime discards it when the test's goroutine ends, and the test
// fails.
func InFreshNetns(tb testing.TB, f func()) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for a network namespace")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // creates it and moves this thread into it
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	defer func() {
		ns.Close()
		if err := netns.Set(orig); err != nil {
			tb.Errorf("netnstest: cannot return to the original network namespace: %v", err)
			return // the thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
	}()
	f()
}
