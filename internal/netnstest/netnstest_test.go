package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	pt "github.com/svcproxy/svcproxy/proxy/proxytest"
)

// handRules is a tiny hand-written kube-proxy-like ruleset over topo:
//
//	vip(1):80     -> pod-a1:8080 | pod-b1:8080, masquerade unless from the cluster CIDR
//	vip(2):80     -> sticky over pod-a1:8080 | pod-b1:8080 (xt_recent)
//	vip(3):53/udp -> pod-a1:5353
//	vip(4):80,53  -> REJECT;  vip(5):80 -> DROP
//	node:30080    -> pod-a1:8080, always masqueraded
//	vip(7):80     -> client:8080 (hairpin: masquerade when the client reaches itself)
func handRules(topo pt.Topology) string {
	a1, b1, c := topo.LocalPods[0], topo.RemotePods[0], topo.ClientPod
	hp := func(p pt.Pod, port int) string { return pt.Backend(p, port).String() }
	vip := func(n int) string { return topo.ServiceIP(n).String() }
	reject := "REJECT"
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("*nat")
	w(":T-SERVICES - [0:0]")
	w(":T-MARK-MASQ - [0:0]")
	w(":T-SVC1 - [0:0]")
	w(":T-SVC2 - [0:0]")
	w(":T-SEP2A - [0:0]")
	w(":T-SEP2B - [0:0]")
	w("-A PREROUTING -j T-SERVICES")
	w("-A OUTPUT -j T-SERVICES")
	w("-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE")
	w("-A T-MARK-MASQ -j MARK --or-mark 0x4000")
	w("-A T-SERVICES -d %s -p tcp --dport 80 ! -s %s -j T-MARK-MASQ", vip(1), topo.ClusterCIDR)
	w("-A T-SERVICES -d %s -p tcp --dport 80 -j T-SVC1", vip(1))
	w("-A T-SVC1 -m statistic --mode random --probability 0.5 -p tcp -j DNAT --to-destination %s", hp(a1, 8080))
	w("-A T-SVC1 -p tcp -j DNAT --to-destination %s", hp(b1, 8080))
	w("-A T-SERVICES -d %s -p tcp --dport 80 -j T-SVC2", vip(2))
	w("-A T-SVC2 -m recent --name T-SEP2A --rcheck --seconds 600 --reap -j T-SEP2A")
	w("-A T-SVC2 -m recent --name T-SEP2B --rcheck --seconds 600 --reap -j T-SEP2B")
	w("-A T-SVC2 -m statistic --mode random --probability 0.5 -j T-SEP2A")
	w("-A T-SVC2 -j T-SEP2B")
	w("-A T-SEP2A -m recent --name T-SEP2A --set -p tcp -j DNAT --to-destination %s", hp(a1, 8080))
	w("-A T-SEP2B -p tcp -m recent --name T-SEP2B --set -j DNAT --to-destination %s", hp(b1, 8080))
	w("-A T-SERVICES -d %s -p udp --dport 53 -j DNAT --to-destination %s", vip(3), hp(a1, 5353))
	w("-A T-SERVICES -m addrtype --dst-type LOCAL -p tcp --dport 30080 -j T-MARK-MASQ")
	w("-A T-SERVICES -m addrtype --dst-type LOCAL -p tcp --dport 30080 -j DNAT --to-destination %s", hp(a1, 8080))
	w("-A T-SERVICES -d %s -s %s -p tcp --dport 80 -j T-MARK-MASQ", vip(7), c.IP)
	w("-A T-SERVICES -d %s -p tcp --dport 80 -j DNAT --to-destination %s", vip(7), hp(c, 8080))
	w("COMMIT")
	w("*filter")
	w(":T-FILTER - [0:0]")
	w("-A FORWARD -j T-FILTER")
	w("-A OUTPUT -j T-FILTER")
	w("-A INPUT -j T-FILTER")
	w("-A T-FILTER -d %s -p tcp --dport 80 -j %s", vip(4), reject)
	w("-A T-FILTER -d %s -p udp --dport 53 -j %s", vip(4), reject)
	w("-A T-FILTER -d %s -p tcp --dport 80 -j DROP", vip(5))
	w("COMMIT")
	return b.String()
}

func restore(t *testing.T, env *Env, rules string) {
	t.Helper()
	if err := Exec(env.Node, func() error { return restoreHere(env, rules) }); err != nil {
		t.Fatal(err)
	}
}

// restoreHere runs iptables-restore (or ip6tables-restore) in the calling
// thread's namespace.
func restoreHere(env *Env, rules string) error {
	tool := "iptables-restore"
	if env.Topo.Family == v1.IPv6Protocol {
		tool = "ip6tables-restore"
	}
	cmd := exec.Command(tool, "--noflush")
	cmd.Stdin = strings.NewReader(rules)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v\n%s\nrules:\n%s", tool, err, out.String(), rules)
	}
	return nil
}

// leftovers lists this process's namespaces still in /run/netns.
func leftovers(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	prefix := fmt.Sprintf("%s%d-", NamePrefix, os.Getpid())
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestTopologyAndProber builds the topology, loads hand-written rules with
// iptables-restore in the node namespace, and checks that the prober
// reports every kind of result correctly; then that nothing is left behind.
func TestTopologyAndProber(t *testing.T) {
	SkipUnlessRoot(t)
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := pt.DefaultTopology(fam)
			t.Run("probe", func(t *testing.T) { probeHandRules(t, topo) })
			if l := leftovers(t); len(l) != 0 {
				t.Errorf("namespaces left behind: %v", l)
			}
		})
	}
}

func probeHandRules(t *testing.T, topo pt.Topology) {
	env := NewEnv(t, topo)
	a1, b1, c := topo.LocalPods[0], topo.RemotePods[0], topo.ClientPod
	vip := topo.ServiceIP
	both := pt.Backends(8080, a1, b1)
	checks := []pt.Check{
		{Name: "pod-to-vip", Packet: pt.FromPodTo(topo, vip(1), 80), Want: pt.ForwardedTo(false, both...)},
		{Name: "node-to-vip", Packet: pt.FromNodeTo(topo, vip(1), 80), Want: pt.ForwardedTo(true, both...)},
		{Name: "external-to-vip", Packet: pt.FromExternalTo(topo, vip(1), 80), Want: pt.ForwardedTo(true, both...)},
		{Name: "external2-to-vip", Packet: pt.From(pt.FromExternalTo(topo, vip(1), 80), topo.ExternalClient2), Want: pt.ForwardedTo(true, both...)},
		{Name: "sticky", Packet: pt.FromPodTo(topo, vip(2), 80), Want: pt.StickyTo(false, both...)},
		{Name: "udp", Packet: pt.UDP(pt.FromPodTo(topo, vip(3), 53)), Want: pt.ForwardedTo(false, pt.Backend(a1, 5353))},
		{Name: "udp-from-node", Packet: pt.UDP(pt.FromNodeTo(topo, vip(3), 53)), Want: pt.ForwardedTo(false, pt.Backend(a1, 5353))},
		{Name: "tcp-on-udp-vip", Packet: pt.FromPodTo(topo, vip(3), 53), Want: pt.Result{Verdict: pt.NotProxied}},
		{Name: "rejected", Packet: pt.FromPodTo(topo, vip(4), 80), Want: pt.Result{Verdict: pt.Rejected}},
		{Name: "rejected-from-node", Packet: pt.FromNodeTo(topo, vip(4), 80), Want: pt.Result{Verdict: pt.Rejected}},
		{Name: "rejected-udp", Packet: pt.UDP(pt.FromExternalTo(topo, vip(4), 53)), Want: pt.Result{Verdict: pt.Rejected}},
		{Name: "dropped", Packet: pt.FromPodTo(topo, vip(5), 80), Want: pt.Result{Verdict: pt.Dropped}},
		{Name: "dropped-from-node", Packet: pt.FromNodeTo(topo, vip(5), 80), Want: pt.Result{Verdict: pt.Dropped}},
		{Name: "not-proxied-vip", Packet: pt.FromPodTo(topo, vip(6), 80), Want: pt.Result{Verdict: pt.NotProxied}},
		{Name: "not-proxied-udp", Packet: pt.UDP(pt.FromExternalTo(topo, topo.LoadBalancerIP(1), 53)), Want: pt.Result{Verdict: pt.NotProxied}},
		{Name: "not-proxied-from-node", Packet: pt.FromNodeTo(topo, topo.ExternalIP(1), 81), Want: pt.Result{Verdict: pt.NotProxied}},
		{Name: "direct-to-pod", Packet: pt.FromPodTo(topo, b1.IP, 8081), Want: pt.Result{Verdict: pt.NotProxied}},
		{Name: "node-port-external", Packet: pt.FromExternalTo(topo, topo.NodeIP, 30080), Want: pt.ForwardedTo(true, pt.Backend(a1, 8080))},
		{Name: "node-port-pod", Packet: pt.FromPodTo(topo, topo.NodeIP, 30080), Want: pt.ForwardedTo(true, pt.Backend(a1, 8080))},
		{Name: "closed-node-port", Packet: pt.FromExternalTo(topo, topo.NodeIP, 30081), Want: pt.Result{Verdict: pt.Rejected}},
		{Name: "hairpin", Packet: pt.FromPodTo(topo, vip(7), 80), Want: pt.ForwardedTo(true, pt.Backend(c, 8080))},
		{Name: "hairpin-other-pod", Packet: pt.From(pt.FromPodTo(topo, vip(7), 80), a1.IP), Want: pt.ForwardedTo(false, pt.Backend(c, 8080))},
	}

	// Before any rule: every service address reaches the world.
	pr := env.Prober()
	for _, ck := range checks[:1] {
		got, err := pr.TraceSample(ck.Packet, ck.Want)
		if err != nil || got.Verdict != pt.NotProxied {
			t.Fatalf("before rules: %s: got %s, %v; want not-proxied", ck.Packet, got, err)
		}
	}

	restore(t, env, handRules(topo))
	for _, ck := range checks {
		got, err := pr.TraceSample(ck.Packet, ck.Want)
		if err != nil {
			t.Errorf("%s: %s: %v", ck.Name, ck.Packet, err)
			continue
		}
		if why := pt.Match(ck.Want, got, true); why != "" {
			t.Errorf("%s: %s:\n  want %s\n  got  %s\n  (%s)", ck.Name, ck.Packet, ck.Want, got, why)
		}
	}
	if t.Failed() {
		t.Logf("rules:\n%s", env.DumpRules())
	}

	// Trace without a hint still sees both backends of a 50/50 split. One
	// unhinted trace (10 answers) sees a single backend with probability
	// 2/2^10, which did happen; three tries make that 1 in 10^8.
	var got pt.Result
	var err error
	for try := 0; try < 3; try++ {
		if got, err = pr.Trace(checks[0].Packet); err != nil || len(got.Backends) == 2 {
			break
		}
	}
	if err != nil || len(got.Backends) != 2 {
		t.Errorf("Trace(%s) = %s, %v; want both backends (three traces)", checks[0].Packet, got, err)
	}
	// The sticky service really pins: a non-sticky want still sees one backend.
	got, err = pr.TraceSample(checks[4].Packet, pt.ForwardedTo(false, both...))
	if err != nil || !got.Sticky || len(got.Backends) != 1 {
		t.Errorf("sticky service sampled as non-sticky: got %s, %v; want one sticky backend", got, err)
	}

	// A host too slow for Timeout: every first try times out, the slow
	// second try answers. Forwarded traces stay forwarded; drops, rejects
	// and the unhinted trace of a drop stay what they are.
	slow := &Prober{env: env, Timeout: time.Nanosecond, SlowTimeout: 3 * time.Second}
	for _, i := range []int{0, 5, 8, 11} {
		ck := checks[i]
		got, err := slow.TraceSample(ck.Packet, ck.Want)
		if err != nil {
			t.Errorf("slow host: %s: %v", ck.Name, err)
			continue
		}
		if why := pt.Match(ck.Want, got, true); why != "" {
			t.Errorf("slow host: %s: want %s, got %s (%s)", ck.Name, ck.Want, got, why)
		}
	}
	if got, err := slow.Trace(checks[11].Packet); err != nil || got.Verdict != pt.Dropped {
		t.Errorf("slow host: Trace(%s) = %s, %v; want dropped", checks[11].Packet, got, err)
	}
	_ = netip.Addr{}
}
