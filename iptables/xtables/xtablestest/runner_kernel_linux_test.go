//go:build linux

package xtablestest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
)

// inScratchNetns runs f on a locked OS thread inside a network namespace
// created for it and gone afterwards. If the thread cannot be moved back
// it stays locked, so the runtime discards it with the goroutine.
func inScratchNetns(t *testing.T, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- err
			return
		}
		defer orig.Close()
		ns, err := netns.New() // creates it and moves this thread into it
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		f()
		if err := netns.Set(orig); err != nil {
			done <- fmt.Errorf("back to the original namespace: %v", err)
			return // thread stays locked: discarded
		}
		runtime.UnlockOSThread()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runnerScript drives a Runner through the calls an engine makes and
// records what each returned (errors only as "error": texts differ).
func runnerScript(ctx context.Context, r xtables.Runner) []string {
	var log []string
	rec := func(what string, existed *bool, err error) {
		s := what + ": "
		if existed != nil {
			s += fmt.Sprintf("existed=%v ", *existed)
		}
		if err != nil {
			s += "error"
		} else {
			s += "ok"
		}
		log = append(log, s)
	}
	nat, filter := xtables.TableNAT, xtables.TableFilter
	ensureChain := func(t xtables.Table, c xtables.Chain) {
		ok, err := r.EnsureChain(ctx, t, c)
		rec(fmt.Sprintf("EnsureChain %s %s", t, c), &ok, err)
	}
	ensureRule := func(pos xtables.RulePosition, t xtables.Table, c xtables.Chain, args ...string) {
		ok, err := r.EnsureRule(ctx, pos, t, c, args...)
		rec(fmt.Sprintf("EnsureRule %s %s %s %q", pos, t, c, args), &ok, err)
	}
	exists := func(t xtables.Table, c xtables.Chain) {
		ok, err := r.ChainExists(ctx, t, c)
		rec(fmt.Sprintf("ChainExists %s %s", t, c), &ok, err)
	}
	exists(nat, "KUBE-X")
	ensureChain(nat, "KUBE-X")
	ensureChain(nat, "KUBE-X")
	exists(nat, "KUBE-X")
	exists(nat, xtables.ChainPrerouting)
	ensureChain(nat, xtables.ChainPrerouting)
	ensureRule(xtables.Append, nat, xtables.ChainPrerouting, "-j", "KUBE-X")
	ensureRule(xtables.Append, nat, xtables.ChainPrerouting, "-j", "KUBE-X")
	ensureRule(xtables.Prepend, nat, "KUBE-X", "-d", "10.0.0.1", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", "10.1.0.1:80")
	ensureRule(xtables.Append, nat, "KUBE-X", "-d", "10.0.0.1/32", "-p", "tcp", "-m", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", "10.1.0.1:80")
	ensureRule(xtables.Append, nat, "KUBE-X", "-j", "MARK", "--or-mark", "0x4000")
	ensureRule(xtables.Prepend, nat, "KUBE-X", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	ensureRule(xtables.Prepend, nat, "KUBE-X", "-m", "comment", "--comment", "a \"quoted\" comment", "-j", "RETURN")
	ensureRule(xtables.Append, nat, "KUBE-X", "-m", "comment", "--comment", "a \"quoted\" comment", "-j", "RETURN")
	ensureRule(xtables.Append, nat, "KUBE-NOPE", "-j", "ACCEPT")
	ensureRule(xtables.Append, nat, "KUBE-X", "-j", "KUBE-NOPE")
	ensureRule(xtables.Append, nat, "KUBE-X", "-j", "DROP")
	rec("DeleteChain nat KUBE-X (referenced)", nil, r.DeleteChain(ctx, nat, "KUBE-X"))
	rec("DeleteRule nat PREROUTING -j KUBE-X", nil, r.DeleteRule(ctx, nat, xtables.ChainPrerouting, "-j", "KUBE-X"))
	rec("DeleteRule nat PREROUTING -j KUBE-X (again)", nil, r.DeleteRule(ctx, nat, xtables.ChainPrerouting, "-j", "KUBE-X"))
	rec("DeleteRule nat KUBE-NOPE", nil, r.DeleteRule(ctx, nat, "KUBE-NOPE", "-j", "ACCEPT"))
	// A rule jumping to a missing chain cannot exist: nil (iptables -C
	// exits 2 there; the exec Runner checks the target chain).
	rec("DeleteRule nat PREROUTING -j KUBE-GONE (missing target)", nil, r.DeleteRule(ctx, nat, xtables.ChainPrerouting, "-j", "KUBE-GONE"))
	rec("DeleteRule with a bad option in a missing chain", nil, r.DeleteRule(ctx, nat, "KUBE-NOPE", "-p", "tcp", "--dprot", "1", "-j", "ACCEPT"))
	rec("DeleteChain nat KUBE-X (not empty)", nil, r.DeleteChain(ctx, nat, "KUBE-X"))
	rec("FlushChain nat KUBE-X", nil, r.FlushChain(ctx, nat, "KUBE-X"))
	rec("DeleteChain nat KUBE-X", nil, r.DeleteChain(ctx, nat, "KUBE-X"))
	rec("DeleteChain nat KUBE-X (again)", nil, r.DeleteChain(ctx, nat, "KUBE-X"))
	rec("FlushChain nat KUBE-X (missing)", nil, r.FlushChain(ctx, nat, "KUBE-X"))
	// Not compared: DeleteChain of an empty built-in chain, which
	// iptables-legacy (and the Fake) refuse and iptables-nft allows.
	ensureChain(filter, "KUBE-FW")
	ensureRule(xtables.Append, filter, xtables.ChainInput, "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "kubernetes firewall", "-j", "KUBE-FW")
	ensureRule(xtables.Append, filter, "KUBE-FW", "!", "-s", "10.0.0.0/8", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "REJECT")
	ensureRule(xtables.Append, filter, xtables.ChainForward, "-p", "udp", "--dport", "53", "-j", "MASQUERADE")
	rec("Restore (good)", nil, r.Restore(ctx, xtables.RestoreInput{Text: []byte("*filter\n:KUBE-FW - [0:0]\n-A KUBE-FW -j RETURN\nCOMMIT\n")}))
	rec("Restore (bad)", nil, r.Restore(ctx, xtables.RestoreInput{Text: []byte("*filter\n:KUBE-FW - [0:0]\n-A KUBE-FW -j KUBE-NOPE\nCOMMIT\n")}))
	for _, t := range []xtables.Table{nat, filter} {
		var buf bytes.Buffer
		err := r.SaveInto(ctx, t, &buf)
		rec("SaveInto "+string(t), nil, err)
		for _, line := range strings.SplitAfter(buf.String(), "\n") {
			if !strings.HasPrefix(line, "#") && line != "" {
				log = append(log, "  "+strings.TrimSuffix(line, "\n"))
			}
		}
	}
	return log
}

// TestRunnerMethodsAgreeWithKernel drives the Fake and the real exec
// Runner (xtables.New, nft and legacy) through the same calls, each real
// one in a scratch network namespace: every call must succeed or fail
// alike, report "existed" alike, and leave the same saved state.
func TestRunnerMethodsAgreeWithKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the real iptables in a scratch network namespace")
	}
	ctx := context.Background()
	want := runnerScript(ctx, xtablestest.NewFake(v1.IPv4Protocol))
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
			if err != nil {
				t.Skipf("no %s iptables: %v", backend, err)
			}
			var got []string
			inScratchNetns(t, func() { got = runnerScript(ctx, real) })
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("real %s runner:\n%s\n\nfake:\n%s", backend, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
