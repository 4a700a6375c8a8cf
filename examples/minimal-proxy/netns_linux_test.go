package main

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to create network namespaces and program iptables (run go test as root)")
	}
}

var nsCounter atomic.Int64

// newNamespace creates a fresh named network namespace with loopback up and
// returns a function running code inside it; the namespace is deleted in
// t.Cleanup. The host namespace is never changed.
func newNamespace(t *testing.T) (name string, inNS inNamespace) {
	t.Helper()
	skipUnlessRoot(t)
	name = fmt.Sprintf("svcproxy-e2e-%d-%d", os.Getpid(), nsCounter.Add(1))

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	handle, err := netns.NewNamed(name) // also switches this thread into it
	if err != nil {
		_ = netns.Set(orig)
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("creating netns %s: %v", name, err)
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if rerr := netns.Set(orig); rerr != nil {
		// Leave the thread locked: it dies with the goroutine instead of
		// running other code in the wrong namespace.
		t.Fatalf("returning to the host netns: %v", rerr)
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() {
		handle.Close()
		orig.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting netns %s: %v", name, err)
		}
	})
	if err != nil {
		t.Fatalf("bringing up lo in %s: %v", name, err)
	}
	return name, func(fn func() error) error { return execInNamespace(handle, fn) }
}

// inNamespaceAt is the inNamespace of the named namespace at path (one a
// netnstest.Env made): fn runs on the caller's thread, as startProcess
// needs, not on a goroutine of its own as netnstest.Exec would. The handle
// is closed in t.Cleanup.
func inNamespaceAt(t *testing.T, path string) inNamespace {
	t.Helper()
	handle, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("opening netns %s: %v", path, err)
	}
	t.Cleanup(func() { handle.Close() })
	return func(fn func() error) error { return execInNamespace(handle, fn) }
}

// execInNamespace runs fn on a locked OS thread switched into ns.
func execInNamespace(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering netns: %w", err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// Thread stays locked and is discarded when the goroutine ends.
		return fmt.Errorf("leaving netns: %w (after %v)", err, fnErr)
	}
	runtime.UnlockOSThread()
	return fnErr
}
