package engine

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// The drift check runs on the OS thread that called Run: an engine run
// inside a network namespace (a locked thread) checks that namespace's
// tables, never the host's.
func TestDriftCheckRunsOnRunsThread(t *testing.T) {
	r := &recorder{syncs: make(chan Request, 16)}
	h := r.hooks()
	tids := make(chan int, 16)
	h.Drifted = func(context.Context) (bool, error) {
		select {
		case tids <- syscall.Gettid():
		default:
		}
		return false, nil
	}
	b, err := New(Common{Logger: testr.New(t), MinSyncPeriod: -1, DriftCheckInterval: time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runTID := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		runTID <- syscall.Gettid()
		done <- b.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	want := <-runTID
	synced(b)
	for i := range 3 {
		select {
		case got := <-tids:
			if got != want {
				t.Fatalf("check %d ran on thread %d, Run's is %d", i, got, want)
			}
		case <-time.After(waitLimit):
			t.Fatal("no drift check ran")
		}
	}
}
