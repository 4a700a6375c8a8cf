//go:build linux

package nftables_test

import (
	"strings"
	"testing"
	"time"
)

// chainNames lists the chains of the kube-proxy table of ip.
func chainNames(t *testing.T) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	for _, l := range strings.Split(nft(t, "list table ip kube-proxy"), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "chain" {
			m[f[1]] = true
		}
	}
	return m
}

// TestKernelResyncRemovesWhatAnotherWriterPutBack: a chain of ours that a
// partial sync deleted (its service deleted), put back with a rule by
// another writer, unreferenced, is found by the next full resync (the
// other writer's commit moved the ruleset generation, so the resync
// lists), flushed at once and deleted a moment later.
func TestKernelResyncRemovesWhatAnotherWriterPutBack(t *testing.T) {
	inFreshNetns(t, func() {
		c := makeCluster(20, 3)
		p := realProxier(t)
		c.feed(p)
		mustSync(t, p)
		before := chainNames(t)
		p.OnServiceDelete(c.services[3])
		mustSync(t, p)
		time.Sleep(1100 * time.Millisecond) // staleDelay: its chains are deleted by a later sync
		p.OnEndpointSliceUpdate(c.slices[4], makeSlice(4, 3, 1))
		mustSync(t, p)
		after := chainNames(t)
		var gone string
		for n := range before {
			if !after[n] && strings.Contains(n, "svc-3") {
				gone = n
			}
		}
		if gone == "" {
			t.Fatalf("no chain of svc-3 was deleted:\nbefore %v\nafter %v", before, after)
		}
		nft(t, "add chain ip kube-proxy "+gone)
		nft(t, "add rule ip kube-proxy "+gone+" counter")
		p.RequestFullSync()
		if out := mustSync(t, p); !out.Full {
			t.Fatal("not a full sync")
		}
		if l := nft(t, "list chain ip kube-proxy "+gone); strings.Contains(l, "counter") {
			t.Errorf("the full resync left the rule of %s, which another writer put back:\n%s", gone, l)
		}
		time.Sleep(1100 * time.Millisecond)
		p.RequestFullSync()
		mustSync(t, p)
		if chainNames(t)[gone] {
			t.Errorf("%s is still there after the next sync", gone)
		}
	})
}
