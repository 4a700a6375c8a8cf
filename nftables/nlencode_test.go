//go:build linux

package nftables

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEncoderKnowsEveryServiceRule: every rule of a per-service chain in
// the golden table has a netlink encoding (a form the encoder does not
// know would silently send partial syncs back through nft, and their cost
// back to O(table)); the kernel tests prove the encodings equal nft's.
func TestEncoderKnowsEveryServiceRule(t *testing.T) {
	b, err := os.ReadFile("testdata/golden.nft")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^add rule ip kube-proxy (\S+) (.*?)( comment ".*")?$`)
	e := newNLEncoder(unix.NFPROTO_IPV4)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		m := rule.FindStringSubmatch(l)
		if m == nil || !isServiceObjectName(m[1]) {
			continue
		}
		n++
		if _, err := e.rule(m[2]); err != nil {
			t.Errorf("chain %s: %q: %v", m[1], m[2], err)
		}
	}
	if n < 20 {
		t.Fatalf("only %d service rules in the golden table", n)
	}
}

// TestEncoderFallsBack: forms outside the encoder's knowledge are refused
// whole, so the change set goes through nft.
func TestEncoderFallsBack(t *testing.T) {
	e := newNLEncoder(unix.NFPROTO_IPV4)
	for _, r := range []string{
		"ip saddr != { 203.0.113.0/25, 203.0.113.128/25 } drop", // touching: nft merges
		"ip saddr != { 10.0.0.0/8, 10.1.0.0/16 } drop",          // overlapping
		"ip saddr != { 10.0.0.0/8, 255.255.255.255 } drop",      // open interval
		"ip saddr != { 10.0.0.0/8, 10.1.0.0/16 drop",            // unterminated
		"ip6 saddr fd00::1 drop",                                // other family
		"ip daddr . meta l4proto . th dport vmap @service-ips",
		"ct state new jump cluster-ips-check",
		"ip saddr 10.0.0.1", // no verdict
		"masquerade fully-random",
	} {
		if _, err := e.rule(r); err == nil {
			t.Errorf("%q encoded; want a fallback to nft", r)
		}
	}
	cs := newChangeSet()
	cs.partial = true
	cs.writes = append(cs.writes, chainWrite{spec: &chainSpec{name: "services", base: &baseChain{typ: "nat", hook: "prerouting", priority: "-100"}}})
	if _, err := encodeChangeSet(unix.NFPROTO_IPV4, cs); err == nil {
		t.Error("a base chain encoded; want a fallback to nft")
	}
	cs = newChangeSet()
	cs.setAdds = append(cs.setAdds, setSpec{name: "affinity-x", typ: "ipv4_addr", timeout: 3 * time.Hour})
	cs.elemAdds = append(cs.elemAdds, elemSpec{container: mapServiceIPs, key: "10.96.0.1 . tcp . 80", value: "goto service-x"})
	msgs, err := encodeChangeSet(unix.NFPROTO_IPV4, cs)
	if err != nil || len(msgs) != 2 {
		t.Errorf("set and element: %d messages, %v", len(msgs), err)
	}
}
