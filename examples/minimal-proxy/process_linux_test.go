package main

import (
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// Children of startProcess outlive OS threads that end under them: Go
// ends a thread when a goroutine exits locked to it (this package's scratch
// namespaces do so on purpose), and a child's Pdeathsig must not hang on
// such a thread. Had the fork run on a thread handed back to the scheduler
// (netnstest.Exec's shape), this test's goroutines would take idle threads
// and end them, and a child would die with one of them: a sketch of that
// shape lost 4 of 5 children to 200 ended threads.
func TestStartProcessSurvivesEndedThreads(t *testing.T) {
	name, inNS := newNamespace(t)
	for i, in := range []inNamespace{inNS, inNamespaceAt(t, "/run/netns/"+name)} {
		var children []*process
		for range 3 {
			children = append(children, startProcess(t, in, "sleep", filepath.Join(t.TempDir(), "sleep.log"), "/bin/sleep", "60"))
		}
		endThreads(300)
		for j, p := range children {
			if p.wait(100 * time.Millisecond) {
				t.Errorf("inNamespace %d, child %d died when threads of this process ended: %v", i, j, p.err)
			}
		}
	}
}

// launchProcess refuses an inNamespace that runs fn on a goroutine of its
// own, the shape under which the children could die.
func TestLaunchProcessRefusesOtherThread(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	other := func(fn func() error) error {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			done <- fn()
		}()
		return <-done
	}
	p, err := launchProcess(other, filepath.Join(t.TempDir(), "sleep.log"), "/bin/sleep", "60")
	if err == nil {
		_ = p.cmd.Process.Kill()
		p.wait(10 * time.Second)
		t.Fatal("launchProcess started a child from another goroutine's thread")
	}
	if !strings.Contains(err.Error(), "not the caller's") {
		t.Fatalf("launchProcess with an inNamespace on another thread: %v, want its refusal", err)
	}
}

// endThreads ends n OS threads: each goroutine exits locked to its own.
func endThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
		}()
		wg.Wait()
	}
}
