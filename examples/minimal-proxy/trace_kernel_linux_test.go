package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// liveTracer answers each check with real packets (the Prober) and also
// runs trace inside the node namespace, as a user would on the node:
// the standard tools' listing, loaded and traced. A trace that does not
// agree with the real packets fails the test.
type liveTracer struct {
	t         *testing.T
	env       *netnstest.Env
	prober    *netnstest.Prober
	opts      traceOptions
	dataplane string // the Dataplane the report must name
	checks    int    // traces compared with real packets

	// The standard tools' listings, read once per state of the dataplane:
	// the conformance harness changes it only through Sync (syncNoting
	// drops them), runUpstreamKernel only when it loads a step (and drops
	// them there), and every check of a step traces over the same
	// listing. Reading them at every check was about 30% of the trace
	// test's CPU on the host, and each exec is slower in the IPVS test's
	// qemu guest.
	tools map[string]toolOutput
	reads int // tool runs, against checks in the log
}

type toolOutput struct {
	out []byte
	err error
}

// tool is the toolRunner trace uses: execTool, remembered until the next
// sync.
func (l *liveTracer) tool(ctx context.Context, name string, args ...string) ([]byte, error) {
	key := name + "\x00" + strings.Join(args, "\x00")
	if o, ok := l.tools[key]; ok {
		return o.out, o.err
	}
	out, err := execTool(ctx, name, args...)
	if l.tools == nil {
		l.tools = map[string]toolOutput{}
	}
	l.tools[key] = toolOutput{out, err}
	l.reads++
	return out, err
}

// syncNoting drops the tracer's remembered listings whenever the engine
// syncs (before and after: a failed sync may have written part). The
// harness never calls Run, whose syncs it could not see: Run fails.
type syncNoting struct {
	proxy.Provider
	l *liveTracer
}

func (s syncNoting) Sync(ctx context.Context) error {
	s.l.tools = nil
	defer func() { s.l.tools = nil }()
	return s.Provider.Sync(ctx)
}

func (s syncNoting) Run(context.Context) error {
	return errors.New("trace kernel tests: Run would sync behind the remembered listings; the harness syncs with Sync")
}

func (l *liveTracer) live(p proxytest.Packet) (proxytest.Result, *traceReport, error) {
	var rep *traceReport
	err := netnstest.Exec(l.env.Node, func() error {
		node, err := readNodeView(p.Dst.Is6())
		if err != nil {
			return err
		}
		o := l.opts
		o.origin = map[proxytest.Origin]string{proxytest.FromPod: "pod", proxytest.FromNode: "node", proxytest.FromExternal: "external"}[p.Origin]
		rep, err = traceNode(context.Background(), &o, p, node, l.tool)
		return err
	})
	if err != nil {
		return proxytest.Result{}, nil, err
	}
	res, err := reportResult(rep)
	return res, rep, err
}

func (l *liveTracer) check(p proxytest.Packet, real proxytest.Result) {
	l.t.Helper()
	if why := l.disagree(p, real); why != "" {
		l.t.Error(why)
	}
}

// disagree traces p and returns "" when trace agrees with real (the real
// packets' result), else why not; it counts the check.
func (l *liveTracer) disagree(p proxytest.Packet, real proxytest.Result) string {
	l.checks++
	got, rep, err := l.live(p)
	if err != nil {
		return fmt.Sprintf("trace %s: %v", p, err)
	}
	if !strings.HasPrefix(rep.Dataplane, l.dataplane) {
		return fmt.Sprintf("trace %s read %q, want %q", p, rep.Dataplane, l.dataplane)
	}
	if why := proxytest.Match(got, real, true); why != "" {
		var text strings.Builder
		rep.writeText(&text)
		return fmt.Sprintf("trace %s says %s, real packets %s: %s\n%s", p, got, real, why, text.String())
	}
	return ""
}

func (l *liveTracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	real, err := l.prober.Trace(p)
	if err == nil {
		l.check(p, real)
	}
	return real, err
}

func (l *liveTracer) TraceSample(p proxytest.Packet, want proxytest.Result) (proxytest.Result, error) {
	real, err := l.prober.TraceSample(p, want)
	if err == nil {
		l.check(p, real)
	}
	return real, err
}

func (l *liveTracer) Dump() string { return l.prober.Dump() }

// runTraceKernel runs the conformance table with real packets, an engine
// from newEngine programming the node namespace, and trace checked
// against the packets at every check.
func runTraceKernel(t *testing.T, family v1.IPFamily, opts traceOptions, dataplane string, quirks []proxytest.Quirk, newEngine func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider) {
	netnstest.SkipUnlessRoot(t)
	topo := proxytest.DefaultTopology(family)
	conformance.RunScenarios(t, topo, proxytest.Scenarios(topo), conformance.Harness{
		New: func(t *testing.T, topo proxytest.Topology, popts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			env := netnstest.NewEnv(t, topo)
			p := newEngine(t, env, popts)
			lt := &liveTracer{t: t, env: env, prober: env.Prober(), opts: opts, dataplane: dataplane}
			t.Cleanup(func() {
				if lt.checks == 0 && !t.Skipped() {
					t.Error("trace was never compared with real packets")
				}
				t.Logf("trace agreed with real packets on %d checks (%d tool runs)", lt.checks, lt.reads)
			})
			return syncNoting{netnstest.InNamespace(p, env.Node), lt}, lt
		},
		Quirks: quirks,
	})
}

// TestTraceKernelIPTables: the iptables engine programs a namespace, and
// trace there (mode and backend detected) agrees with real packets on
// every check of the conformance table, with either backend.
func TestTraceKernelIPTables(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			t.Run(backend+"/"+string(family), func(t *testing.T) {
				runTraceKernel(t, family, traceOptions{}, "iptables ("+backend+" backend)", nil, func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
					var ipt xtables.Runner
					err := netnstest.Exec(env.Node, func() error {
						var err error
						ipt, err = xtables.New(xtables.RunnerConfig{Family: env.Topo.Family, Backend: backend})
						return err
					})
					if err != nil {
						t.Skipf("iptables %s backend unavailable: %v", backend, err)
					}
					cfg := topologyIPTablesConfig(env.Topo, opts)
					cfg.Conntrack = conntrack.New()
					p, err := iptables.NewProxier(cfg, iptables.Interfaces{IPTables: ipt})
					if err != nil {
						t.Fatal(err)
					}
					return p
				})
			})
		}
	}
}

// TestTraceKernelNFTables: the nftables engine programs a namespace, and
// trace there (mode detected: the kube-proxy table is there) agrees with
// real packets on every check of the conformance table.
func TestTraceKernelNFTables(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			runTraceKernel(t, family, traceOptions{}, "nftables", nftablestest.ConformanceQuirks(proxytest.Topology{}), func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
				var ifs nftables.Interfaces
				err := netnstest.Exec(env.Node, func() error {
					var err error
					ifs, err = nftkernel.NewInterfaces(env.Topo.Family)
					return err
				})
				if err != nil {
					t.Skipf("nftables unavailable: %v", err)
				}
				topo := env.Topo
				p, err := nftables.NewProxier(nftables.Config{
					Common: enginebase.Common{IPFamily: topo.Family, NodeName: topo.NodeName, NodeIPs: []netip.Addr{topo.NodeIP}, Conntrack: conntrack.New()},
					Netfilter: enginebase.Netfilter{
						MasqueradeAll:     opts.MasqueradeAll,
						LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
						NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
					},
					LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{topo.NodeIP, topo.PodGateway}, nil },
				}, ifs)
				if err != nil {
					t.Fatal(err)
				}
				return p
			})
		})
	}
}

// TestTraceKernelUpstreamIPTables loads upstream kube-proxy v1.37.2's
// iptables rules for every step of the conformance table (testdata/trace)
// into the real topology's node namespace, with either iptables backend,
// and requires trace there to agree with real packets on every check.
func TestTraceKernelUpstreamIPTables(t *testing.T) {
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		restore := "iptables-" + backend + "-restore"
		if _, err := exec.LookPath(restore); err != nil {
			t.Logf("skipping the %s backend: %v", backend, err)
			continue
		}
		t.Run(backend, func(t *testing.T) {
			runUpstreamKernel(t, upstreamRulesDir, ".iptables-save", "iptables ("+backend+" backend)", restore)
		})
	}
}

// TestTraceKernelUpstreamNFTables: the same over upstream v1.37.2's
// nftables table (its layout: no endpoint chains without affinity,
// numgen maps inline in the dnat, the hairpin set), loaded with nft -f.
func TestTraceKernelUpstreamNFTables(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skipf("nft is not installed: %v", err)
	}
	runUpstreamKernel(t, upstreamRulesDir+"-nftables", ".nft", "nftables", "nft", "-f", "-")
}

// runUpstreamKernel loads each step's rules (dir/<scenario>__<step><ext>)
// with the load command (reading them on stdin) in the node namespace of
// a fresh topology per scenario, flushes conntrack, and checks trace
// against real packets on every check of the step. It compares trace
// with the kernel, not with the table's wanted results: where upstream
// differs from the table, both must show the same.
func runUpstreamKernel(t *testing.T, dir, ext, dataplane string, load ...string) {
	if testing.Short() {
		t.Skip("real-kernel checks take minutes; skipped with -short")
	}
	netnstest.SkipUnlessRoot(t)
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, sc := range proxytest.Scenarios(topo) {
		t.Run(sc.Name, func(t *testing.T) {
			env := netnstest.NewEnv(t, topo)
			lt := &liveTracer{t: t, env: env, prober: env.Prober(), dataplane: dataplane}
			for _, st := range sc.Steps {
				rules, err := os.ReadFile(filepath.Join(dir, proxytest.StepFileName(sc.Name, st.Name)+ext))
				if err != nil {
					t.Fatal(err)
				}
				err = netnstest.Exec(env.Node, func() error {
					if load[0] == "nft" {
						// nft -f adds to what is there: start from no table.
						_ = exec.Command("nft", "delete", "table", "ip", nftTableName).Run()
					}
					cmd := exec.Command(load[0], load[1:]...)
					cmd.Stdin = bytes.NewReader(rules)
					if out, err := cmd.CombinedOutput(); err != nil {
						return fmt.Errorf("%s: %v: %s", strings.Join(load, " "), err, out)
					}
					// Checks are new connections: no entry of the
					// previous step's may catch them.
					_ = exec.Command("conntrack", "-F").Run()
					return nil
				})
				if err != nil {
					t.Fatalf("step %s: %v", st.Name, err)
				}
				lt.tools = nil // this step's rules, not the listing of the last
				for _, c := range st.Checks {
					real, err := lt.prober.TraceSample(c.Packet, c.Want)
					if err != nil {
						t.Errorf("step %s check %s: real packets: %v", st.Name, c.Name, err)
						continue
					}
					lt.check(c.Packet, real)
				}
			}
			t.Logf("trace agreed with real packets on %d checks", lt.checks)
		})
	}
}

// TestTraceKernelIPVS: the IPVS engine programs a namespace, and trace
// there (mode detected from the IPVS table) agrees with real packets on
// every check of the conformance table. It needs a kernel with IPVS and
// skips elsewhere: where the host has none, the ipvs e2e's qemu guest
// checks trace against real packets at every check of the same table
// (TestE2EKubeAPIServerIPVS, the binary's state); this test's own guest
// run (hack/vmtest/run-trace-ipvs.sh, about fifteen minutes under
// emulation) stays a manual tool.
func TestTraceKernelIPVS(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	netnstest.SkipUnlessRoot(t)
	t.Parallel() // beside the other trace tests: the guest is mostly one busy core
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Skip("this kernel has no IPVS: TestE2EKubeAPIServerIPVS checks trace against real packets in its qemu guest (hack/vmtest/run-trace-ipvs.sh runs this test in one)")
	}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			topo := proxytest.DefaultTopology(family)
			runTraceKernel(t, family, traceOptions{}, "ipvs", ipvstest.ConformanceQuirks(topo), func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
				var ifs ipvs.Interfaces
				err := netnstest.Exec(env.Node, func() error {
					var err error
					ifs, err = ipvskernel.NewInterfaces(ipvskernel.InterfacesOptions{Family: env.Topo.Family})
					return err // Sync runs inside the node namespace, where Sysctl and iptables act
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ifs.IPVS.Close() })
				p, err := ipvs.NewProxier(ipvs.Config{
					Common: enginebase.Common{IPFamily: env.Topo.Family, NodeName: env.Topo.NodeName, Conntrack: conntrack.New()},
					Netfilter: enginebase.Netfilter{
						MasqueradeAll: opts.MasqueradeAll,
						LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: env.Topo.ClusterCIDR},
					},
				}, ifs)
				if err != nil {
					t.Fatal(err)
				}
				return p
			})
		})
	}
}
