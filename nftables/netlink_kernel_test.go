//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// countingWriter counts the batches that reached the kernel and can make
// one of them fail: failAt (1-based; 0 never) gets a message the kernel
// refuses appended, so the whole batch is rejected.
type countingWriter struct {
	w       nftables.NetlinkWriter
	batches atomic.Int64
	failAt  int64
	// tamperAt (1-based; 0 never): after that batch commits, another
	// writer adds a rule to every per-service chain (the kernel state
	// changed behind the writer).
	tamperAt int64
	t        *testing.T
	fam      v1.IPFamily
}

func (c *countingWriter) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	n := c.batches.Add(1)
	if n == c.tamperAt {
		if err := c.w.WriteBatch(ctx, msgs); err != nil {
			return err
		}
		fam := string(nftables.Family(c.fam))
		for _, l := range strings.Split(nft(c.t, "list table "+fam+" kube-proxy"), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && f[0] == "chain" && (strings.HasPrefix(f[1], "service-") || strings.HasPrefix(f[1], "endpoint-")) {
				nft(c.t, "add rule "+fam+" kube-proxy "+f[1]+" counter")
			}
		}
		return nil
	}
	if n == c.failAt {
		bad := msgs[len(msgs)-1]
		ae := netlink.NewAttributeEncoder()
		ae.String(unix.NFTA_CHAIN_TABLE, nftables.TableName)
		ae.String(unix.NFTA_CHAIN_NAME, "no-such-chain")
		b, _ := ae.Encode()
		bad.Header = netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELCHAIN), Flags: netlink.Request}
		bad.Data = append(append([]byte{}, bad.Data[:4]...), b...)
		msgs = append(append([]netlink.Message{}, msgs...), bad)
	}
	return c.w.WriteBatch(ctx, msgs)
}

// twin is one engine writing through nft only and one writing partial
// syncs over netlink, each in a network namespace of its own, fed the same
// objects.
type twin struct {
	t    *testing.T
	fam  v1.IPFamily
	ns   [2]netns.NsHandle
	p    [2]*nftables.Proxier
	feed [2]*proxytest.Feeder
	// ifs are the Interfaces each side's engines use, built once in
	// its namespace (NewInterfaces probes nft a dozen times, seconds
	// under qemu's emulation): a later engine on that side (a cold
	// start, a restart) is a new Proxier over the same handles, which
	// keep no state of their own between calls.
	ifs      [2]nftables.Interfaces
	nl       *countingWriter
	partials int // partial syncs with writes on the netlink side
}

// withTwin runs f with a twin whose engines are built by cfg; the calling
// goroutine's thread moves between the namespaces and returns home after.
func withTwin(t *testing.T, fam v1.IPFamily, cfg nftables.Config, f func(tw *twin)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft binary")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the original netns: %v", err))
		}
	}()
	tw := &twin{t: t, fam: fam, nl: &countingWriter{w: nftkernel.NewNetlinkWriter(), t: t, fam: fam}}
	for i := range tw.ns {
		ns, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		tw.ns[i] = ns
		ifs, err := nftkernel.NewInterfaces(fam)
		if err != nil {
			t.Skipf("nftables unavailable: %v", err)
		}
		if i == 0 {
			ifs.Netlink = nil
		} else {
			ifs.Netlink = tw.nl
		}
		tw.ifs[i] = ifs
		p, err := nftables.NewProxier(cfg, ifs)
		if err != nil {
			t.Fatal(err)
		}
		tw.p[i], tw.feed[i] = p, proxytest.NewFeeder(p)
	}
	f(tw)
}

func (tw *twin) enter(i int) {
	if err := netns.Set(tw.ns[i]); err != nil {
		tw.t.Fatal(err)
	}
}

func (tw *twin) list(i int) string {
	tw.enter(i)
	return normalizeListing(nft(tw.t, "list table "+string(nftables.Family(tw.fam))+" kube-proxy"))
}

// normalizeListing drops empty (stale) chains and sorts the elements of
// each set and map (their listing order follows the kernel's hash).
func normalizeListing(s string) string {
	s = stripStale(s)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		out = append(out, l)
	}
	joined := strings.Join(out, "\n")
	// Elements are listed "elements = { a, b,\n c }": sort them.
	var b strings.Builder
	for {
		i := strings.Index(joined, "elements = { ")
		if i < 0 {
			b.WriteString(joined)
			break
		}
		j := strings.Index(joined[i:], " }")
		b.WriteString(joined[:i])
		body := joined[i+len("elements = { ") : i+j]
		var elems []string
		for _, e := range strings.Split(body, ",") {
			elems = append(elems, strings.TrimSpace(e))
		}
		sort.Strings(elems)
		b.WriteString("elements = { " + strings.Join(elems, ", ") + " }")
		joined = joined[i+j+2:]
	}
	return b.String()
}

// step applies objs to both engines, syncs them and compares the tables.
func (tw *twin) step(name string, objs proxytest.Objects) {
	tw.t.Helper()
	var lists [2]string
	for i := range tw.p {
		tw.enter(i)
		if err := tw.feed[i].Apply(objs); err != nil {
			tw.t.Fatal(err)
		}
		tw.feed[i].Synced()
		if err := tw.p[i].Sync(context.Background()); err != nil {
			tw.t.Fatalf("%s: engine %d: %v", name, i, err)
		}
		if last := tw.p[i].Stats().Last; i == 1 && !last.Full && last.Result.Writes > 0 {
			tw.partials++
		}
		lists[i] = tw.list(i)
	}
	if lists[0] != lists[1] {
		tw.t.Fatalf("%s: the table written over netlink differs from nft's:\n%s", name, listingDiff(lists[0], lists[1]))
	}
}

func listingDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("line %d\n  nft:     %q\n  netlink: %q", i+1, x, y))
		}
		if len(out) > 20 {
			break
		}
	}
	return strings.Join(out, "\n")
}

// formsObjects are services with every rule and element form the planner
// emits for per-service objects: the golden table's services (cluster IP,
// node port with affinity, load balancer with one source range, external
// IP and eTP Local, iTP Local, no endpoints) plus UDP and SCTP ports.
func formsObjects(topo proxytest.Topology) proxytest.Objects {
	svcs, slices := goldenObjects(topo)
	for _, s := range svcs {
		if s.Name == "lb" {
			s.Spec.LoadBalancerSourceRanges = []string{sourceRange(topo, 0)} // of the topology's family
		}
	}
	svcs = append(svcs, proxytest.MakeService(topo, "dns", topo.ServiceIP(6), []proxytest.ServicePortSpec{
		{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: 5353, NodePort: 30053},
		{Name: "sig", Protocol: v1.ProtocolSCTP, Port: 9, TargetPort: 9999},
	}, func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }))
	slices = append(slices, proxytest.MakeSlice(topo, "dns", "1",
		[]proxytest.SlicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: 5353}, {Name: "sig", Protocol: v1.ProtocolSCTP, Port: 9999}},
		proxytest.EndpointSpec{Pod: topo.LocalPods[0]}, proxytest.EndpointSpec{Pod: topo.RemotePods[0]}))
	return proxytest.Objects{Services: svcs, EndpointSlices: slices}
}

// sourceRange returns a non-byte-aligned range of the test documentation
// block of the family.
func sourceRange(topo proxytest.Topology, i int) string {
	if topo.Family == v1.IPv6Protocol {
		return []string{"2001:db8:ff00::/41", "2001:db8:ee00::/44"}[i]
	}
	return []string{"203.0.113.0/25", "198.18.0.0/15"}[i]
}

// touchingRange is the range right after sourceRange(topo, 0).
func touchingRange(topo proxytest.Topology) string {
	if topo.Family == v1.IPv6Protocol {
		return "2001:db8:ff80::/41"
	}
	return "203.0.113.128/25"
}

// TestKernelNetlinkEquivalence: for every rule and element form, and
// along a random walk through the conformance table's states, partial
// syncs written over netlink leave exactly the table nft leaves (same
// "nft list table", comments and content hashes included), and a restart
// over the netlink-written table finds every chain's hash and writes
// nothing.
func TestKernelNetlinkEquivalence(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(fam)
		groups := map[proxytest.Options][]proxytest.Scenario{}
		for _, sc := range proxytest.Scenarios(topo) {
			groups[sc.Options] = append(groups[sc.Options], sc)
		}
		for opts, scs := range groups {
			t.Run(fmt.Sprintf("%s/masqueradeAll=%v", fam, opts.MasqueradeAll), func(t *testing.T) {
				withTwin(t, fam, conformanceConfig(topo, opts), func(tw *twin) {
					tw.step("empty", proxytest.Objects{})
					forms := formsObjects(topo)
					before := tw.nl.batches.Load()
					tw.step("forms", forms)
					if tw.nl.batches.Load() != before+1 {
						t.Fatalf("the forms step did not go over netlink (%d batches)", tw.nl.batches.Load()-before)
					}
					// Every object removed again, then written again.
					tw.step("none", proxytest.Objects{})
					tw.step("forms again", forms)

					// Two source ranges: an anonymous interval set.
					multi := formsObjects(topo)
					multi.Services[2].Spec.LoadBalancerSourceRanges = append(multi.Services[2].Spec.LoadBalancerSourceRanges, sourceRange(topo, 1))
					before = tw.nl.batches.Load()
					tw.step("two source ranges", multi)
					if tw.nl.batches.Load() != before+1 {
						t.Fatal("the two-range firewall did not go over netlink")
					}
					// Ranges that touch (nft merges them): left to nft.
					merged := formsObjects(topo)
					merged.Services[2].Spec.LoadBalancerSourceRanges = append(merged.Services[2].Spec.LoadBalancerSourceRanges, touchingRange(topo))
					tw.step("touching source ranges", merged)
					tw.step("two source ranges again", multi)

					// Every step of the conformance table, in a random order.
					r := rand.New(rand.NewPCG(uint64(len(scs)), 7))
					var steps []proxytest.Step
					for _, sc := range scs {
						steps = append(steps, sc.Steps...)
					}
					r.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
					last := multi
					for _, st := range steps {
						tw.step(st.Name, st.Objects)
						last = st.Objects
					}
					if tw.nl.batches.Load() < int64(tw.partials)/2 {
						t.Errorf("only %d of %d partial syncs went over netlink", tw.nl.batches.Load(), tw.partials)
					}
					t.Logf("%d partial syncs wrote, %d over netlink", tw.partials, tw.nl.batches.Load())

					// A restart over the netlink-written table reads every
					// chain's content hash back: it writes what a restart
					// over nft's table writes (nothing, but for the
					// leftovers both engines keep alike).
					var writes [2]int
					for i := range tw.p {
						before := tw.list(i)
						ifs, err := nftkernel.NewInterfaces(fam)
						if err != nil {
							t.Fatal(err)
						}
						q, err := nftables.NewProxier(conformanceConfig(topo, opts), ifs)
						if err != nil {
							t.Fatal(err)
						}
						fq := proxytest.NewFeeder(q)
						if err := fq.Apply(last); err != nil {
							t.Fatal(err)
						}
						fq.Synced()
						writes[i] = mustSync(t, q).Result.Writes
						if after := tw.list(i); after != before {
							t.Errorf("engine %d: the restart changed the table:\n%s", i, listingDiff(before, after))
						}
					}
					if writes[0] != writes[1] {
						t.Errorf("restart over nft's table wrote %d operations, over the netlink-written one %d", writes[0], writes[1])
					}
				})
			})
		}
	}
}

// TestKernelNetlinkInterfaceMatches: the local-traffic matches by
// interface name (a bridge, a name prefix) written over netlink equal
// nft's.
func TestKernelNetlinkInterfaceMatches(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, ld := range []proxy.LocalDetector{
		{Mode: proxy.LocalModeBridgeInterface, Interface: "cni0"},
		{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"},
	} {
		t.Run(string(ld.Mode), func(t *testing.T) {
			cfg := conformanceConfig(topo, proxytest.Options{})
			cfg.LocalDetector = ld
			withTwin(t, v1.IPv4Protocol, cfg, func(tw *twin) {
				tw.step("empty", proxytest.Objects{})
				before := tw.nl.batches.Load()
				tw.step("forms", formsObjects(topo))
				if tw.nl.batches.Load() != before+1 {
					t.Fatal("the forms step did not go over netlink")
				}
				tw.step("none", proxytest.Objects{})
			})
		})
	}
}

// TestKernelNetlinkFault: a batch the kernel refuses (a message it
// cannot apply appended to a real batch) changes nothing in the kernel and
// is written again through nft at once: the sync succeeds with nft's
// table, the refusal is counted, and later batches still go over netlink
// (one refusal is not enough to switch the writer off).
func TestKernelNetlinkFault(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			withTwin(t, fam, conformanceConfig(topo, proxytest.Options{}), func(tw *twin) {
				tw.step("empty", proxytest.Objects{})
				forms := formsObjects(topo)
				tw.step("forms", forms)
				if st := nftables.NetlinkStatsOf(tw.p[1]); !st.Active || st.SelfChecks != 1 || st.SelfCheckFailures != 0 {
					t.Fatalf("after the first netlink batch: %+v, want one read-back that found the plan", st)
				}

				changed := formsObjects(topo)
				changed.EndpointSlices[0] = proxytest.MakeSlice(topo, "web", "1",
					[]proxytest.SlicePortSpec{{Name: "http", Port: 8080}}, proxytest.EndpointSpec{Pod: topo.RemotePods[1]})
				changed.Services = changed.Services[:5] // "dns" removed

				tw.nl.failAt = tw.nl.batches.Load() + 1
				tw.step("refused over netlink, written by nft", changed)
				st := nftables.NetlinkStatsOf(tw.p[1])
				if st.Refused != 1 || st.ToolTook != 1 || !st.Active {
					t.Errorf("after a refused batch: %+v, want 1 refused, taken by nft, the writer still on", st)
				}
				if s := tw.p[1].Stats(); s.Failures != 0 || s.Last.Full {
					t.Errorf("failures = %d, last full = %v; want a successful partial sync", s.Failures, s.Last.Full)
				}
				n := tw.nl.batches.Load()
				tw.step("back", forms)
				if tw.nl.batches.Load() != n+1 {
					t.Error("the partial sync after the refusal did not go over netlink")
				}
			})
		})
	}
}

// TestKernelNetlinkSelfCheck: the kernel state changed behind the netlink
// writer (a rule added to every per-service chain right after its first
// batch) is found by the read-back: the sync fails with ErrSelfCheck, the
// writer is off for good, and the next sync, a full one through nft,
// converges to nft's table.
func TestKernelNetlinkSelfCheck(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	withTwin(t, v1.IPv4Protocol, conformanceConfig(topo, proxytest.Options{}), func(tw *twin) {
		tw.step("empty", proxytest.Objects{})
		forms := formsObjects(topo)
		tw.nl.tamperAt = tw.nl.batches.Load() + 1
		tw.enter(1)
		if err := tw.feed[1].Apply(forms); err != nil {
			t.Fatal(err)
		}
		err := tw.p[1].Sync(context.Background())
		if !errors.Is(err, nftables.ErrSelfCheck) {
			t.Fatalf("sync with the table changed behind the writer = %v, want ErrSelfCheck", err)
		}
		st := nftables.NetlinkStatsOf(tw.p[1])
		if st.Active || st.SwitchedOff != nftables.OffSelfCheck || st.SelfCheckFailures != 1 {
			t.Fatalf("after the failed read-back: %+v, want the writer off by the self-check", st)
		}
		n := tw.nl.batches.Load()
		tw.step("repaired through nft", forms)
		if !tw.p[1].Stats().Last.Full {
			t.Error("the sync after the failed read-back was not full")
		}
		other := formsObjects(topo)
		other.Services = other.Services[:5]
		tw.step("later, through nft", other)
		if tw.nl.batches.Load() != n {
			t.Errorf("%d batches over netlink after the writer was switched off", tw.nl.batches.Load()-n)
		}
	})
}
