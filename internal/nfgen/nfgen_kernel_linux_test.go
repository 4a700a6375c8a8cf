//go:build linux

package nfgen

import (
	"hash/maphash"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

func gen(t *testing.T) uint32 {
	t.Helper()
	g, err := Generation()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGenerationCountsCommits: every committed transaction (nft, and the
// iptables-nft tools) moves the generation by one; listings do not.
func TestGenerationCountsCommits(t *testing.T) {
	netnstest.InFreshNetns(t, func() {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("no nft binary")
		}
		g0 := gen(t)
		if g := gen(t); g != g0 {
			t.Fatalf("reading moved the generation: %d -> %d", g0, g)
		}
		run(t, "nft", "add table ip t; add chain ip t c; add rule ip t c counter")
		g1 := gen(t)
		if g1 != g0+1 {
			t.Errorf("one nft transaction: generation %d -> %d, want +1", g0, g1)
		}
		run(t, "nft", "list ruleset")
		if g := gen(t); g != g1 {
			t.Errorf("nft list moved the generation: %d -> %d", g1, g)
		}
		if _, err := exec.LookPath("iptables-nft-restore"); err != nil {
			return
		}
		run(t, "iptables-nft", "-t", "nat", "-N", "X")
		g2 := gen(t)
		if g2 != g1+1 {
			t.Errorf("iptables-nft -N: generation %d -> %d, want +1", g1, g2)
		}
		run(t, "iptables-nft-save")
		exec.Command("iptables-nft", "-t", "nat", "-C", "X", "-j", "RETURN").Run() // not there: exit 1
		if g := gen(t); g != g2 {
			t.Errorf("iptables-nft-save / -C moved the generation: %d -> %d", g2, g)
		}
	})
}

func TestLegacyDigest(t *testing.T) {
	netnstest.InFreshNetns(t, func() {
		if _, err := exec.LookPath("iptables-legacy"); err != nil {
			t.Skip("no iptables-legacy")
		}
		seed := maphash.MakeSeed()
		run(t, "iptables-legacy", "-t", "nat", "-N", "A")
		d0, ok, err := LegacyDigest(false, "nat", seed)
		if err != nil || !ok {
			t.Fatalf("LegacyDigest: %v %v", ok, err)
		}
		// nat: 4 built-in chains (policy each), chain A (head, return),
		// the end: 4+2+1.
		if d0.Entries != 7 {
			t.Errorf("entries = %d, want 7", d0.Entries)
		}
		if d, _, _ := LegacyDigest(false, "nat", seed); d != d0 {
			t.Errorf("two reads differ: %+v %+v", d0, d)
		}
		run(t, "iptables-legacy", "-t", "nat", "-A", "A", "-s", "10.0.0.1", "-j", "RETURN")
		d1, _, _ := LegacyDigest(false, "nat", seed)
		if d1.Hash == d0.Hash || d1.Entries != 8 {
			t.Errorf("after a rule: %+v (before %+v)", d1, d0)
		}
		// Same size, other content.
		run(t, "iptables-legacy", "-t", "nat", "-R", "A", "1", "-s", "10.0.0.2", "-j", "RETURN")
		d2, _, _ := LegacyDigest(false, "nat", seed)
		if d2.Hash == d1.Hash || d2.Size != d1.Size {
			t.Errorf("after replacing the rule: %+v (before %+v)", d2, d1)
		}
		// Counters are not content: packets through a counted rule do not
		// change the digest.
		run(t, "ip", "link", "set", "lo", "up")
		run(t, "iptables-legacy", "-t", "filter", "-A", "OUTPUT", "-p", "udp", "-j", "ACCEPT")
		d3, _, _ := LegacyDigest(false, "filter", seed)
		c, err := net.Dial("udp", "127.0.0.1:9")
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		c.Write([]byte("y"))
		c.Close()
		out, _ := exec.Command("iptables-legacy-save", "-c", "-t", "filter").Output()
		if !strings.Contains(string(out), "[2:") {
			t.Errorf("the test's traffic did not move the counters:\n%s", out)
		}
		if d, _, _ := LegacyDigest(false, "filter", seed); d != d3 {
			t.Errorf("traffic changed the digest: %+v -> %+v", d3, d)
		}
		i1, _, _ := LegacyInfo(false, "nat")
		if i1.Entries != d2.Entries || i1.Size != d2.Size {
			t.Errorf("LegacyInfo %+v, LegacyDigest %+v", i1, d2)
		}
		if _, ok, err := LegacyDigest(true, "nat", seed); err != nil {
			t.Errorf("ip6 nat: %v %v", ok, err)
		}
	})
}
