package main

import (
	"context"
	"io"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

// syncIPVSFakes builds the ipvs engine as the binary does for args, over
// f instead of the kernel, and syncs it once with args' objects: f is
// then a node after a sync.
func syncIPVSFakes(t *testing.T, args []string, f *ipvstest.Fakes) {
	t.Helper()
	ctx := context.Background()
	o, err := parseOptions(args, runtime.GOOS, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.ipvsNode = func(v1.IPFamily) (*ipvstest.Fakes, error) { return f, nil }
	src, nodeName, err := newSource(o, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	node, err := src.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := buildEngine(ctx, engineParams{
		mode: modeIPVS, opts: o, nodeName: nodeName, node: node, log: logr.Discard(), dryRun: true,
		nodeIPs: nodeAddresses(node, "", logr.Discard()),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.close()
	if err := src.load(ctx, eng.proxier); err != nil {
		t.Fatal(err)
	}
	if err := eng.proxier.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDiffIPVS: after a sync of the demo, diff in the ipvs mode is empty;
// after a real server is deleted, a stray address bound to kube-ipvs0, a
// stray virtual server added on it and a chain flushed by hand, it shows
// the commands that repair each.
func TestDiffIPVS(t *testing.T) {
	args := []string{"--objects-file=demo.yaml", "--proxy-mode=ipvs"}
	nodeIP := netip.MustParseAddr("192.168.1.10")
	f := ipvstest.NewFakes(v1.IPv4Protocol)
	f.Netlink.AddLink("eth0", nodeIP)
	syncIPVSFakes(t, args, f)
	node := &nodeView{Addrs: []netip.Addr{nodeIP}}
	read := func(_ context.Context, family v1.IPFamily) (ipvsSources, error) {
		if family != v1.IPv4Protocol {
			t.Errorf("read the %s state of an IPv4 node", family)
		}
		return ipvsSources{IPVS: f.IPVS, IPSet: f.IPSet, Netlink: f.Netlink, Saved: f.IPTables.Dump()}, nil
	}
	diff := func() []string {
		t.Helper()
		o, err := parseOptions(args, runtime.GOOS, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := diffIPVS(context.Background(), o, read, node, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		return cmds
	}
	if cmds := diff(); len(cmds) != 0 {
		t.Fatalf("diff after a sync:\n%s", strings.Join(cmds, "\n"))
	}

	key := ipvs.VirtualServerKey{Address: netip.MustParseAddr("10.96.10.10"), Protocol: v1.ProtocolTCP, Port: 80}
	vs, rss, ok := f.IPVS.Lookup(key)
	if !ok || len(rss) != 2 {
		t.Fatalf("the demo's web service: %v %v", vs, rss)
	}
	if err := f.IPVS.DeleteRealServer(vs, rss[0]); err != nil {
		t.Fatal(err)
	}
	stray := netip.MustParseAddr("10.96.99.99")
	if _, err := f.Netlink.EnsureAddressBind(stray, ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	strayVS := &ipvs.VirtualServer{Address: stray, Protocol: v1.ProtocolTCP, Port: 80, Scheduler: "rr"}
	if err := f.IPVS.AddVirtualServer(strayVS); err != nil {
		t.Fatal(err)
	}
	if err := f.IPTables.Restore(context.Background(), xtables.RestoreInput{Text: []byte("*nat\n-F KUBE-SERVICES\nCOMMIT\n")}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(diff(), "\n") + "\n"
	for _, want := range []string{
		"ipvsadm -a -t 10.96.10.10:80 -r " + rss[0].AddrPort().String() + " -m -w 1\n",
		"ipvsadm -D -t 10.96.99.99:80\n",
		"ip addr del 10.96.99.99/32 dev kube-ipvs0\n",
		"iptables -t nat -F KUBE-SERVICES\n",
		"iptables -t nat -A KUBE-SERVICES ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
}
