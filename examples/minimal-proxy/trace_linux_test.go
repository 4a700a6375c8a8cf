package main

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// TestTraceNFTablesListing: upstream kube-proxy v1.34.4's nftables table
// for nftables' golden objects (nftables/testdata/upstream/ipv4.nft),
// as "nft list table ip kube-proxy" prints it after loading it into a
// scratch namespace (testdata/trace).
func TestTraceNFTablesListing(t *testing.T) {
	listing, err := os.ReadFile("testdata/trace/kube-proxy-v1.34-ipv4.nft-list")
	if err != nil {
		t.Fatal(err)
	}
	run := cannedTools(t, map[string]string{"nft list table ip kube-proxy": string(listing)})
	node := &nodeView{
		Addrs:             []netip.Addr{netip.MustParseAddr("192.168.50.10")},
		Routes:            []nodeRoute{{Prefix: netip.MustParsePrefix("10.244.1.0/24"), Interface: "cbr0"}},
		DefaultInterface4: "eth0",
	}
	for _, tc := range []struct {
		from, to, result string
		backends         []string
	}{
		{"10.244.1.9", "10.96.0.1:80/tcp", "forwarded", []string{"10.244.1.2:8080", "10.244.2.2:8080"}},
		{"10.244.1.9", "10.96.0.5:80/tcp", "rejected", nil},
		{"203.0.113.200", "192.0.2.1:80/tcp", "dropped", nil},
		{"203.0.113.7", "192.0.2.1:80/tcp", "forwarded", []string{"10.244.1.2:8080"}},
		{"10.244.1.9", "10.96.0.99:80/tcp", "not-proxied", nil},
	} {
		p, err := parseDestination(tc.to)
		if err != nil {
			t.Fatal(err)
		}
		p.Src = netip.MustParseAddr(tc.from)
		rep, err := traceNode(context.Background(), &traceOptions{}, p, node, run)
		if err != nil {
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
			continue
		}
		var got []string
		for _, b := range rep.Reach {
			got = append(got, b.Backend)
			if want := 1 / float64(len(tc.backends)); b.Probability == nil || *b.Probability != float64(int(want*1e6))/1e6 && *b.Probability != want {
				t.Errorf("%s -> %s: backend %s probability %v", tc.from, tc.to, b.Backend, b.Probability)
			}
		}
		if rep.Result != tc.result || strings.Join(got, " ") != strings.Join(tc.backends, " ") || !strings.HasPrefix(rep.Dataplane, "nftables") {
			var text strings.Builder
			rep.writeText(&text)
			t.Errorf("%s -> %s: %s %v, want %s %v\n%s", tc.from, tc.to, rep.Result, got, tc.result, tc.backends, text.String())
		}
	}
}
