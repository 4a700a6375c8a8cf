//go:build linux

package xtables_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/xtblob"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// logSink collects the messages a Runner logs, at every verbosity.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (s *logSink) runner(t *testing.T, cfg xtables.RunnerConfig) xtables.Runner {
	t.Helper()
	cfg.Logger = funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.msgs = append(s.msgs, args)
	}, funcr.Options{Verbosity: 9})
	r, err := xtables.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (s *logSink) fellBack() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if strings.Contains(m, "Restoring with the iptables tool") {
			return true
		}
	}
	return false
}

func needLegacy(t *testing.T) {
	t.Helper()
	netnstest.SkipUnlessRoot(t)
	if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
		t.Skipf("needs iptables-legacy: %v", err)
	}
}

// saveAll lists every table of the calling thread's namespace, without
// the tool's comment lines (its version and the time).
func saveAll(t *testing.T, r xtables.Runner) string {
	t.Helper()
	var buf bytes.Buffer
	if err := r.SaveAllInto(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The legacy Runner applies what the engines write from the process, and
// leaves the tables iptables-legacy-restore leaves; input it cannot encode
// goes to the tool whole.
func TestInProcessRestoreMatchesTool(t *testing.T) {
	needLegacy(t)
	foreign := []byte("*filter\n:FOREIGN - [0:0]\n-A FOREIGN -m limit --limit 5/sec -j ACCEPT\n-A INPUT -j FOREIGN\nCOMMIT\n")
	for fam, file := range map[v1.IPFamily]string{v1.IPv4Protocol: "policies-affinity-udp.golden", v1.IPv6Protocol: "ipv6-nodeport-addresses.golden"} {
		golden, err := os.ReadFile(filepath.Join("..", "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		var listings [2]string
		for i, tool := range []bool{false, true} {
			netnstest.InFreshNetns(t, func() {
				var logs logSink
				r := logs.runner(t, xtables.RunnerConfig{Family: fam, Backend: xtables.BackendLegacy, LegacyTool: tool})
				if got := r.(xtables.InProcessRestorer).RestoresInProcess(); got == tool {
					t.Fatalf("RestoresInProcess = %v with LegacyTool %v", got, tool)
				}
				ctx := context.Background()
				if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil {
					t.Fatalf("Restore of the golden payload (LegacyTool %v): %v", tool, err)
				}
				if logs.fellBack() {
					t.Errorf("the golden payload went to the tool (LegacyTool %v): %q", tool, logs.msgs)
				}
				// -m limit is no match the engines write: the tool runs.
				if err := r.Restore(ctx, xtables.RestoreInput{Text: foreign}); err != nil {
					t.Fatalf("Restore of a foreign chain: %v", err)
				}
				if !tool && !logs.fellBack() {
					t.Errorf("input with -m limit did not fall back to the tool: %q", logs.msgs)
				}
				if un, rf := r.(xtables.InProcessRestorer).HandedToTool(); !tool && (un != 1 || rf != 0) {
					t.Errorf("HandedToTool = %d unsupported, %d refused; want 1, 0", un, rf)
				}
				listings[i] = saveAll(t, r)
			})
		}
		if listings[0] != listings[1] {
			t.Errorf("%s: in process:\n%s\nwith the tool:\n%s", fam, listings[0], listings[1])
		}
		if !strings.Contains(listings[0], "-A FOREIGN -m limit") || !strings.Contains(listings[0], "-j DNAT --to-destination") {
			t.Errorf("%s: listing lacks what was restored:\n%s", fam, listings[0])
		}
	}
}

// A bad line is a *RestoreError naming it, and nothing of its table is
// written; a held lock is a counted *LockError after the bounded wait.
func TestInProcessRestoreErrors(t *testing.T) {
	needLegacy(t)
	lockPath := filepath.Join(t.TempDir(), "xtables.lock")
	t.Setenv("XTABLES_LOCKFILE", lockPath)
	netnstest.InFreshNetns(t, func() {
		held := 0
		var logs logSink
		r := logs.runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy, LockWait: time.Second,
			OnLockHeld: func(tool string) { held++ }})
		ctx := context.Background()
		err := r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-MISSING\nCOMMIT\n")})
		var re *xtables.RestoreError
		if !errors.As(err, &re) || re.Line != 3 || re.LineText != "-A KUBE-A -j KUBE-MISSING" {
			t.Fatalf("Restore of a jump to a missing chain = %v, want a *RestoreError at line 3", err)
		}
		if ok, err := r.ChainExists(ctx, xtables.TableNAT, "KUBE-A"); err != nil || ok {
			t.Errorf("after the failed restore KUBE-A exists = %v (%v), want the table unchanged", ok, err)
		}

		lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-A - [0:0]\nCOMMIT\n")})
		var le *xtables.LockError
		if !errors.As(err, &le) || !errors.Is(err, xtables.ErrLockHeld) || !errors.Is(err, xtables.ErrRestore) || held != 1 {
			t.Fatalf("Restore with the lock held = %v (counted %d), want a counted *LockError inside a *RestoreError", err, held)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("waited %s for a 1 s lock wait", d)
		}
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		if err := r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-A - [0:0]\nCOMMIT\n")}); err != nil {
			t.Fatalf("Restore after the lock was released: %v", err)
		}
		if logs.fellBack() {
			t.Errorf("a plain chain declaration went to the tool: %q", logs.msgs)
		}
	})
}

// A write the kernel refuses is retried with the tool; when the tool takes
// it, the Runner uses the tool from then on. A bad input is refused by
// both, and the error names its line.
func TestInProcessRefusedFallsBackToTool(t *testing.T) {
	needLegacy(t)
	golden, err := os.ReadFile(filepath.Join("..", "testdata", "policies-affinity-udp.golden"))
	if err != nil {
		t.Fatal(err)
	}
	netnstest.InFreshNetns(t, func() {
		var logs logSink
		r := logs.runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy})
		ctx := context.Background()
		err := r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-MISSING\nCOMMIT\n")})
		var re *xtables.RestoreError
		if !errors.As(err, &re) || re.Line != 3 {
			t.Fatalf("Restore of a bad input = %v, want a *RestoreError at line 3", err)
		}
		if !r.(xtables.InProcessRestorer).RestoresInProcess() {
			t.Fatal("a bad input turned the in-process restore off")
		}
		calls := 0
		xtables.SetWriteTables(r, func(xtblob.Family, []byte, xtblob.RestoreOptions) error {
			calls++
			return fmt.Errorf("table nat: replace: %w", syscall.EINVAL)
		})
		if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil {
			t.Fatalf("Restore with the kernel refusing the in-process write: %v, want the tool's success", err)
		}
		if r.(xtables.InProcessRestorer).RestoresInProcess() {
			t.Error("still restoring in process after the tool took what it was refused")
		}
		if un, rf := r.(xtables.InProcessRestorer).HandedToTool(); un != 0 || rf != 2 {
			t.Errorf("HandedToTool = %d unsupported, %d refused; want 0, 2 (the bad input and the refused write)", un, rf)
		}
		if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil || calls != 1 {
			t.Errorf("next Restore = %v after %d in-process calls, want the tool alone", err, calls)
		}
		if ok, err := r.ChainExists(ctx, xtables.TableNAT, "KUBE-SVC-F7REZHQFGEE5SPJR"); err != nil || !ok {
			t.Errorf("the golden's chain exists = %v (%v) after the tool's restore", ok, err)
		}
	})
}
