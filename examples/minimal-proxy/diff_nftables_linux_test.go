package main

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// nodeListing is a small kube-proxy table as "nft -s list table" prints it.
const nodeListing = `table ip kube-proxy {
	comment "rules for kube-proxy"
	set affinity-X {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
		elements = { 10.0.0.9 timeout 3h expires 2h }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto service-A-default/web/tcp/http,
			     10.96.0.11 . tcp . 80 : goto service-B-default/old/tcp/http }
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain service-A-default/web/tcp/http {
		meta l4proto tcp dnat to 10.244.1.2:8080 comment "svcproxy:abc"
	}
	chain service-B-default/old/tcp/http {
		meta l4proto tcp dnat to 10.244.1.3:8080
	}
}
`

// TestDiffNFTablesPlan: a table against itself is no change (the
// dynamic set's elements are not compared); against a node with a chain
// emptied by hand, a map element missing and a stale chain, the nft
// commands that put them right, deletions last.
func TestDiffNFTablesPlan(t *testing.T) {
	const header = "# minimal-proxy dry run: mode nftables, node n, node IPs [192.168.1.10]\n"
	planned := func(ctx context.Context, family v1.IPFamily, plan string) (string, error) {
		return nodeListing, nil
	}
	live := func(listing string) toolRunner {
		return cannedTools(t, map[string]string{"nft -s list table ip kube-proxy": listing})
	}
	empty := strings.Replace(nodeListing, "elements = { 10.0.0.9 timeout 3h expires 2h }", "", 1)
	cmds, err := diffNFTablesPlan(context.Background(), header, live(empty), planned)
	if err != nil || len(cmds) != 0 {
		t.Fatalf("diff of the table against itself: %q %v", cmds, err)
	}

	edited := strings.Replace(nodeListing, `meta l4proto tcp dnat to 10.244.1.2:8080 comment "svcproxy:abc"`, "", 1)
	edited = strings.Replace(edited, "10.96.0.10 . tcp . 80 : goto service-A-default/web/tcp/http,", "", 1)
	edited = strings.Replace(edited, "chain services {", "chain stale {\n\t}\n\tchain services {", 1)
	cmds, err = diffNFTablesPlan(context.Background(), header, live(edited), planned)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cmds, "\n")
	want := strings.Join([]string{
		"nft 'add element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 : goto service-A-default/web/tcp/http }'",
		"nft 'flush chain ip kube-proxy service-A-default/web/tcp/http'",
		`nft 'add rule ip kube-proxy service-A-default/web/tcp/http meta l4proto tcp dnat to 10.244.1.2:8080 comment "svcproxy:abc"'`,
		"nft 'flush chain ip kube-proxy stale'",
		"nft 'delete chain ip kube-proxy stale'",
	}, "\n")
	if got != want {
		t.Errorf("diff after a hand edit:\n%s\nwant:\n%s", got, want)
	}

	// No table on the node: everything is added.
	missing := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return nil, &toolFailedError{cmd: name, msg: "Error: No such file or directory; did you mean table 'kube-proxy' in family inet?"}
	}
	cmds, err = diffNFTablesPlan(context.Background(), header, missing, planned)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 || cmds[0] != `nft 'add table ip kube-proxy { comment "rules for kube-proxy" ; }'` {
		t.Errorf("diff against a node without the table starts %q", cmds)
	}
}
