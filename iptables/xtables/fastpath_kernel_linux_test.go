//go:build linux

package xtables_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/xtblob"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// The environment variable switches the in-process path off (and on)
// without a rebuild; RunnerConfig.LegacyTool switches it off whatever
// the variable says.
func TestInProcessEnvSwitch(t *testing.T) {
	needLegacy(t)
	for _, tc := range []struct {
		env        string
		legacyTool bool
		want       bool
	}{
		{"", false, true}, // this host's kernel and tools are the verified ones
		{"0", false, false},
		{"1", false, true},
		{"1", true, false},
		{"", true, false},
	} {
		t.Setenv(fastpath.EnvLegacyInProcess, tc.env)
		var logs logSink
		r := logs.runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy, LegacyTool: tc.legacyTool})
		st := r.(xtables.InProcessRestorer).InProcessStats()
		if st.Active != tc.want || r.(xtables.InProcessRestorer).RestoresInProcess() != tc.want {
			t.Errorf("%s=%q, LegacyTool %v: in process %v, want %v (logs %q)", fastpath.EnvLegacyInProcess, tc.env, tc.legacyTool, st.Active, tc.want, logs.msgs)
		}
		if len(logs.msgs) == 0 || !strings.Contains(strings.Join(logs.msgs, "\n"), "estor") {
			t.Errorf("no log line says which path restores: %q", logs.msgs)
		}
	}
}

// partialInput inserts a rule into a built-in chain of filter, then writes
// a loop of jumps to nat, which the kernel refuses after filter was
// replaced. Replaying it would insert the filter rule twice.
const partialInput = "*filter\n:KUBE-PARTIAL-A - [0:0]\n-I INPUT -j KUBE-PARTIAL-A\n-A KUBE-PARTIAL-A -j ACCEPT\nCOMMIT\n" +
	"*nat\n:KUBE-PARTIAL-L1 - [0:0]\n:KUBE-PARTIAL-L2 - [0:0]\n-A OUTPUT -j KUBE-PARTIAL-L1\n" +
	"-A KUBE-PARTIAL-L1 -j KUBE-PARTIAL-L2\n-A KUBE-PARTIAL-L2 -j KUBE-PARTIAL-L1\nCOMMIT\n"

// A refusal after an earlier table was written is not replayed through
// the tool: the error matches ErrPartialRestore (the engine's next sync
// is a full one), the first table holds its part once, and the path stays
// on.
func TestInProcessPartialCommitNotReplayed(t *testing.T) {
	needLegacy(t)
	netnstest.InFreshNetns(t, func() {
		var logs logSink
		r := logs.runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy})
		err := r.Restore(context.Background(), xtables.RestoreInput{Text: []byte(partialInput)})
		if !errors.Is(err, xtables.ErrPartialRestore) || !errors.Is(err, xtables.ErrRestore) {
			t.Fatalf("Restore refused after the first table = %v, want ErrPartialRestore", err)
		}
		all := saveAll(t, r)
		if n := strings.Count(all, "-A INPUT -j KUBE-PARTIAL-A"); n != 1 {
			t.Errorf("the filter rule is there %d times, want once (no replay):\n%s", n, all)
		}
		if strings.Contains(all, "KUBE-PARTIAL-L1") {
			t.Errorf("nat holds the refused part:\n%s", all)
		}
		st := r.(xtables.InProcessRestorer).InProcessStats()
		if st.Partial != 1 || st.Refused != 0 || st.Unsupported != 0 || !st.Active {
			t.Errorf("InProcessStats = %+v, want 1 partial, nothing handed to the tool, still active", st)
		}
	})
}

// The self-check reads back the first in-process write and the first
// after CheckNextRestore: a table changed behind the writer (between its
// write and the read-back) turns the path off, fails the Restore with
// ErrSelfCheck and is counted; so does a tool listing that differs.
func TestInProcessSelfCheck(t *testing.T) {
	needLegacy(t)
	golden, err := os.ReadFile(filepath.Join("..", "testdata", "policies-affinity-udp.golden"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	netnstest.InFreshNetns(t, func() {
		var offs []string
		r := (&logSink{}).runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy, OnInProcessOff: func(r string) { offs = append(offs, r) }})
		ip := r.(xtables.InProcessRestorer)
		if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil {
			t.Fatalf("first Restore: %v", err)
		}
		if st := ip.InProcessStats(); st.SelfChecks != 1 || st.SelfCheckFailures != 0 || !st.Active {
			t.Fatalf("after the first write: %+v, want one passed self-check", st)
		}
		// Not checked again until asked.
		if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil || ip.InProcessStats().SelfChecks != 1 {
			t.Fatalf("second Restore = %v, %d self-checks; want no read-back", err, ip.InProcessStats().SelfChecks)
		}
		// A writer changes a rule of ours right after our write.
		r.CheckNextRestore()
		xtables.SetWriteTables(r, func(f xtblob.Family, data []byte, o xtblob.RestoreOptions) error {
			if err := xtblob.Restore(f, data, o); err != nil {
				return err
			}
			out, err := exec.Command("iptables-legacy", "-w", "5", "-t", "nat", "-R", "KUBE-SVC-F7REZHQFGEE5SPJR", "1", "-j", "RETURN").CombinedOutput()
			if err != nil {
				t.Fatalf("iptables-legacy -R: %v: %s", err, out)
			}
			return nil
		})
		err := r.Restore(ctx, xtables.RestoreInput{Text: golden})
		if !errors.Is(err, xtables.ErrSelfCheck) || !errors.Is(err, xblobMismatch) {
			t.Fatalf("Restore with the table changed behind it = %v, want ErrSelfCheck", err)
		}
		st := ip.InProcessStats()
		if st.Active || st.SwitchedOff != xtables.OffSelfCheck || st.SelfCheckFailures != 1 || len(offs) != 1 || offs[0] != xtables.OffSelfCheck {
			t.Errorf("after the mismatch: %+v (offs %q), want switched off by the self-check", st, offs)
		}
		// The tool writes from now on, and repairs the chain.
		if err := r.Restore(ctx, xtables.RestoreInput{Text: golden}); err != nil {
			t.Fatal(err)
		}
		if all := saveAll(t, r); strings.Contains(all, "-A KUBE-SVC-F7REZHQFGEE5SPJR -j RETURN") {
			t.Errorf("the tool's restore left the changed rule:\n%s", all)
		}
	})
	netnstest.InFreshNetns(t, func() {
		// The tool lists a rule otherwise than the process wrote it.
		r := (&logSink{}).runner(t, xtables.RunnerConfig{Backend: xtables.BackendLegacy})
		xtables.SetListTable(r, func(ctx context.Context, table xtables.Table, buf *bytes.Buffer) error {
			var b bytes.Buffer
			if err := r.SaveInto(ctx, table, &b); err != nil {
				return err
			}
			buf.Write(bytes.Replace(b.Bytes(), []byte("-j KUBE-SEP-"), []byte("-m mark --mark 0x1 -j KUBE-SEP-"), 1))
			return nil
		})
		err := r.Restore(ctx, xtables.RestoreInput{Text: golden})
		if !errors.Is(err, xtables.ErrSelfCheck) || !strings.Contains(err.Error(), "as the tool lists it") {
			t.Fatalf("Restore whose listing differs = %v, want ErrSelfCheck naming the tool's listing", err)
		}
		if st := r.(xtables.InProcessRestorer).InProcessStats(); st.Active || st.SwitchedOff != xtables.OffSelfCheck {
			t.Errorf("after a listing that differs: %+v, want switched off", st)
		}
	})
}

var xblobMismatch = xtblob.ErrMismatch
