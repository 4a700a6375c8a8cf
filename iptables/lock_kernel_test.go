//go:build linux

package iptables_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestLockHeldKernel holds the xtables lock (a lock file of the test's
// own, named by XTABLES_LOCKFILE, never the host's /run/xtables.lock)
// while the legacy backend syncs in a namespace of the test's own: every
// sync gives up after the bounded wait with an error matching
// xtables.ErrLockHeld, counted; once the lock is released the next sync
// converges. (The nft backend takes no lock.)
func TestLockHeldKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	if _, err := exec.LookPath("iptables-legacy"); err != nil {
		t.Skipf("needs iptables-legacy: %v", err)
	}
	lockPath := filepath.Join(t.TempDir(), "xtables.lock")
	t.Setenv("XTABLES_LOCKFILE", lockPath)
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	env := netnstest.NewEnv(t, topo)
	ctx := context.Background()
	m := metrics.New()
	lockHeld := 0
	var p *Proxier
	var firstErr, retryErr error
	var elapsed time.Duration
	err = netnstest.Exec(env.Node, func() error {
		ipt, err := xtables.New(xtables.RunnerConfig{
			Family: v1.IPv4Protocol, Backend: xtables.BackendLegacy,
			LockWait: time.Second, OnLockHeld: func(string) { lockHeld++ },
		})
		if err != nil {
			return err
		}
		cfg := conformanceConfig(topo, proxytest.Options{})
		cfg.Metrics = m
		if p, err = NewProxier(cfg, Interfaces{IPTables: ipt}); err != nil {
			return err
		}
		f := proxytest.NewFeeder(p)
		if err := f.Apply(proxytest.Scenarios(topo)[0].Steps[0].Objects); err != nil {
			return err
		}
		f.Synced()
		start := time.Now()
		firstErr = p.Sync(ctx)
		elapsed = time.Since(start)
		retryErr = p.Sync(ctx) // still held: fails the same way
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a sync with the lock held failed after %v: %v", elapsed, firstErr)
	for i, err := range []error{firstErr, retryErr} {
		var se *engine.SyncError
		if !errors.Is(err, xtables.ErrLockHeld) || !errors.As(err, &se) || !se.Full {
			t.Fatalf("sync %d with the lock held = %v, want a full *engine.SyncError matching xtables.ErrLockHeld", i+1, err)
		}
	}
	if lockHeld < 2 {
		t.Errorf("lock timeouts counted %d, want one per failed sync (2)", lockHeld)
	}
	if st := p.Stats(); st.Failures != 2 || st.ConsecutiveFailures != 2 {
		t.Errorf("Stats %+v, want 2 failures", st)
	}

	// Released: the next sync converges.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	err = netnstest.Exec(env.Node, func() error {
		if err := p.Sync(ctx); err != nil {
			return err
		}
		ipt, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: xtables.BackendLegacy})
		if err != nil {
			return err
		}
		if n := kubeLines(t, ipt); n == 0 {
			return errors.New("the sync after the release wrote no KUBE- rules")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after releasing the lock: %v", err)
	}
	if st := p.Stats(); st.ConsecutiveFailures != 0 || !st.Last.Full {
		t.Errorf("Stats after release %+v, want a successful full sync", st)
	}

	// Held again during a partial sync: the iptables-restore gives up, the
	// restore failure is counted, and the sync after the release converges.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	p.OnServiceAdd(svc("ns", "late", "172.30.0.99"))
	var partialErr error
	if err := netnstest.Exec(env.Node, func() error { partialErr = p.Sync(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	var re *xtables.RestoreError
	if !errors.Is(partialErr, xtables.ErrLockHeld) || !errors.As(partialErr, &re) {
		t.Fatalf("partial sync with the lock held = %v, want an *xtables.RestoreError matching ErrLockHeld", partialErr)
	}
	if got := testutil.ToFloat64(m.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("restore failures counted %v, want 1", got)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.Exec(env.Node, func() error { return p.Sync(ctx) }); err != nil {
		t.Fatalf("sync after the second release: %v", err)
	}
}
