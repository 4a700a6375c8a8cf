package main

// The end-to-end test: the minimal-proxy binary against a real
// kube-apiserver, programming a real kernel in the conformance topology's
// node namespace, driven through the API and checked with real connections.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Bounds of the e2e test's waits, stretched by $SVCPROXY_E2E_SLOWDOWN
// (an integer factor; the ipvs e2e sets it inside its emulated VM).
var (
	// convergeTimeout: how long a check may take to hold after its step's
	// objects were written to the API server (informer delivery, the
	// engine's min sync period, iptables-restore).
	convergeTimeout = slowdown(60 * time.Second)
	// readyTimeout: how long the proxy may take to answer /healthz 200.
	readyTimeout = slowdown(2 * time.Minute)
	// stopTimeout: how long the proxy may take to exit after SIGTERM. The
	// binary aims at well under a second; this only bounds the wait.
	stopTimeout = slowdown(5 * time.Second)
	// apiServerReadyTimeout: how long etcd and kube-apiserver may take to
	// answer /readyz.
	apiServerReadyTimeout = slowdown(3 * time.Minute)
)

// slowdown stretches d by $SVCPROXY_E2E_SLOWDOWN when that is an integer
// above 1.
func slowdown(d time.Duration) time.Duration {
	if f, err := strconv.Atoi(os.Getenv("SVCPROXY_E2E_SLOWDOWN")); err == nil && f > 1 {
		return d * time.Duration(f)
	}
	return d
}

var (
	proxyBinaryOnce sync.Once
	proxyBinaryPath string
	proxyBinaryErr  error
)

// buildProxyBinary builds this package with go build, once per test run,
// into testBinDir, which TestMain removes when the run ends (nothing is
// left in /tmp); $SVCPROXY_MINIMAL_PROXY names a prebuilt binary instead.
// The go build cache makes every build after the first a link only.
func buildProxyBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("SVCPROXY_MINIMAL_PROXY"); bin != "" {
		return bin
	}
	proxyBinaryOnce.Do(func() {
		if testBinDir == "" {
			proxyBinaryErr = fmt.Errorf("no test binary directory (TestMain did not run)")
			return
		}
		proxyBinaryPath = filepath.Join(testBinDir, "minimal-proxy")
		// Static, as hack/vmtest/run-e2e-ipvs.sh builds it for the guest:
		// one build configuration, so the guest's build is a cache hit.
		cmd := exec.Command("go", "build", "-o", proxyBinaryPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			proxyBinaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if proxyBinaryErr != nil {
		t.Fatal(proxyBinaryErr)
	}
	return proxyBinaryPath
}

// proxyProcess is a running minimal-proxy.
type proxyProcess struct {
	*process
	logPath string
	inNS    inNamespace
	healthz string // host:port inside the namespace
	metrics string
}

// startProxy starts the binary inside the namespace; t.Cleanup stops it.
func startProxy(t *testing.T, inNS inNamespace, name string, args ...string) *proxyProcess {
	t.Helper()
	bin := buildProxyBinary(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	p := &proxyProcess{
		logPath: logPath, inNS: inNS,
		healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249",
	}
	args = append([]string{"--healthz-bind-address=" + p.healthz, "--metrics-bind-address=" + p.metrics}, args...)
	p.process = startProcess(t, inNS, name, logPath, bin, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (last 60 lines):\n%s", name, tail(readFile(logPath), 60))
		}
	})
	return p
}

// get fetches http://addr/path from inside the namespace.
func (p *proxyProcess) get(addr, path string) (int, string, error) {
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			var conn net.Conn
			err := p.inNS(func() error {
				var err error
				conn, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, a)
				return err
			})
			return conn, err
		}},
	}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), err
}

// waitHealthy polls /healthz until 200 (bounded), failing early if the
// process exits.
func (p *proxyProcess) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("minimal-proxy exited before becoming healthy (%v):\n%s", p.err, tail(readFile(p.logPath), 40))
		}
		code, body, err := p.get(p.healthz, "/healthz")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %s %v", code, strings.TrimSpace(body), err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("minimal-proxy not healthy after %v (last /healthz: %s)", readyTimeout, last)
}

// stop sends SIGTERM and checks the process exits, with status 0, within
// stopTimeout.
func (p *proxyProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if !p.wait(stopTimeout) {
		t.Fatalf("minimal-proxy still running %v after SIGTERM", stopTimeout)
	}
	if p.err != nil {
		t.Fatalf("minimal-proxy exited with %v after SIGTERM:\n%s", p.err, tail(readFile(p.logPath), 30))
	}
	if log := readFile(p.logPath); !strings.Contains(log, "Stopped") || strings.Contains(log, "panic") {
		t.Errorf("minimal-proxy log does not show a clean stop:\n%s", tail(log, 20))
	}
}

// addServiceCIDR makes cidr allocatable for Services next to the API
// server's primary range (whose first address the default "kubernetes"
// Service takes). With no kube-controller-manager to mark the ServiceCIDR
// ready, the test does, as that controller would.
func addServiceCIDR(t *testing.T, cp *controlPlane, cidr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc, err := cp.Client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-services"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ServiceCIDR %s: %v", cidr, err)
	}
	sc.Status.Conditions = []metav1.Condition{{
		Type:               networkingv1.ServiceCIDRConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             "E2ETest",
		Message:            "marked ready by the e2e test (no kube-controller-manager)",
		LastTransitionTime: metav1.Now(),
	}}
	if _, err := cp.Client.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking ServiceCIDR %s ready: %v", cidr, err)
	}
	// The allocator picks the new range up from its informer: wait until a
	// Service can take an address from it (bounded), then delete the probe.
	probe := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-cidr-probe", Namespace: "default"},
		Spec:       v1.ServiceSpec{ClusterIP: lastAddr(cidr), Ports: []v1.ServicePort{{Port: 1}}},
	}
	var lastErr error
	for ctx.Err() == nil {
		if _, lastErr = cp.Client.CoreV1().Services("default").Create(ctx, probe, metav1.CreateOptions{}); lastErr == nil {
			if err := cp.Client.CoreV1().Services("default").Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("ServiceCIDR %s never became usable: %v", cidr, lastErr)
}

// lastAddr is the last usable address of an IPv4 CIDR (broadcast minus one).
func lastAddr(cidr string) string {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	ip := make(net.IP, len(n.IP))
	for i := range n.IP {
		ip[i] = n.IP[i] | ^n.Mask[i]
	}
	ip[len(ip)-1]--
	return ip.String()
}

// runScenariosThroughAPI writes each step's objects to the API server and
// waits (bounded) until every check holds on the real kernel. After a step
// with a failed check it logs the node's dataplane as dump lists it (nil:
// nothing) and the tail of the proxy's log, once per step.
//
// With lt, trace runs inside the node namespace after every check that
// converged and must agree with the real packets' result (lt.disagree).
func runScenariosThroughAPI(t *testing.T, env *netnstest.Env, p *proxyProcess, h *apiHandlers, feeder *proxytest.Feeder, scenarios []proxytest.Scenario, dump func() string, lt *liveTracer) {
	t.Helper()
	prober := env.Prober()
	node := proxytest.MakeNode(env.Topo, env.Topo.Zone)
	steps, programmed := 0, 0
	defer func() {
		// The wait reads two metrics by name: a run where it never saw
		// a step programmed would check nothing it claims to.
		if steps > 0 && programmed == 0 {
			t.Errorf("none of %d steps was seen programmed (the proxy's queued and last sync timestamps)", steps)
		}
		t.Logf("%d of %d steps seen programmed before their checks", programmed, steps)
	}()
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			// Start from nothing but the node: the previous scenario's
			// objects are deleted (cluster IPs and node ports freed).
			if err := feeder.Apply(proxytest.Objects{Node: node}); err != nil {
				t.Fatal(err)
			}
			if err := h.Err(); err != nil {
				t.Fatalf("clearing the previous scenario: %v", err)
			}
			for _, st := range sc.Steps {
				written := time.Now()
				if lt != nil {
					lt.tools = nil // the listings of the previous step
				}
				if err := feeder.Apply(st.Objects); err != nil {
					t.Fatalf("step %q: %v", st.Name, err)
				}
				if err := h.Err(); err != nil {
					t.Fatalf("step %q: writing objects: %v", st.Name, err)
				}
				// Every check waits for the step to be programmed: a check
				// can hold before (rejected, dropped, not proxied; and
				// forwarded to backends that are a subset of the old
				// state's, where the prober's first answers may all come
				// from them), so converging alone does not show the proxy
				// applied the step. Bounded: a step that changes nothing
				// for this proxy queues no change.
				steps++
				if why := p.waitProgrammed(written, 3*time.Second); why != "" {
					t.Logf("step %q: %s; checking as it stands", st.Name, why)
				} else {
					programmed++
				}
				failed := false
				for _, c := range st.Checks {
					why, real := converge(prober, c)
					if why != "" {
						t.Errorf("step %q check %q: %s after %v", st.Name, c.Name, why, convergeTimeout)
						failed = true
						continue
					}
					if lt == nil {
						continue
					}
					if why := agreeAfterSync(p, prober, lt, c, real, written); why != "" {
						t.Errorf("step %q check %q: %s", st.Name, c.Name, why)
						failed = true
					}
				}
				if failed {
					if dump != nil {
						t.Logf("step %q: the node's dataplane now:\n%s", st.Name, dump())
					}
					t.Logf("step %q: the proxy's log (last 40 lines):\n%s", st.Name, tail(readFile(p.logPath), 40))
				}
			}
		})
	}
}

// waitProgrammed waits (at most d) until the proxy queued a change after
// t0 (kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds) and then
// finished a sync (..._last_timestamp_seconds) after the last change it
// queued; "" once it did, else what it saw. It cannot tell a sync that
// began before the last change from one that began after (the metrics
// give when syncs end): a step whose writes arrive during the sync of its
// first write may be checked after that sync, with the rest programmed a
// moment later; its forwarded checks then converge on the later sync.
func (p *proxyProcess) waitProgrammed(t0 time.Time, d time.Duration) string {
	deadline := time.Now().Add(d)
	var queued, synced float64
	for {
		if _, body, err := p.get(p.metrics, "/metrics"); err == nil {
			queued = metricValue(body, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
			synced = metricValue(body, "kubeproxy_sync_proxy_rules_last_timestamp_seconds")
			if queued > unixSeconds(t0) && synced >= queued {
				return ""
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if queued <= unixSeconds(t0) {
		return fmt.Sprintf("no change queued in the %v after the writes", d)
	}
	return fmt.Sprintf("no sync ended in the %v after the last change queued (%.3f s after the writes)", d, queued-unixSeconds(t0))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// metricValue is the value of the first sample of metric in a Prometheus
// text body, 0 when there is none.
func metricValue(body, metric string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, metric); ok && (rest == "" || rest[0] == ' ' || rest[0] == '{') {
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				return v
			}
		}
	}
	return 0
}

// waitSyncAfter waits (at most d) until the proxy's
// kubeproxy_sync_proxy_rules_last_timestamp_seconds is after t0.
func (p *proxyProcess) waitSyncAfter(t0 time.Time, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, body, err := p.get(p.metrics, "/metrics"); err == nil &&
			metricValue(body, "kubeproxy_sync_proxy_rules_last_timestamp_seconds") > unixSeconds(t0) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agreeAfterSync returns "" once trace (lt) agrees with the real packets
// on c, else the last disagreement (bounded by convergeTimeout). The
// listings are read once per step, and a check can converge before its
// step is programmed: the prober stops at the first answer of each wanted
// backend, and the previous state may hold those among others (a
// topology change that leaves one of three). So after a disagreement it
// waits for a sync that ended after the step's writes, then probes and
// traces again over fresh listings until both agree.
func agreeAfterSync(p *proxyProcess, prober *netnstest.Prober, lt *liveTracer, c proxytest.Check, real proxytest.Result, written time.Time) string {
	why := lt.disagree(c.Packet, real)
	if why == "" {
		return ""
	}
	p.waitSyncAfter(written, 3*time.Second)
	deadline := time.Now().Add(convergeTimeout)
	for {
		lt.tools = nil
		var notReal string
		if notReal, real = converge(prober, c); notReal != "" {
			why = notReal
		} else if why = lt.disagree(c.Packet, real); why == "" {
			return ""
		}
		if time.Now().After(deadline) {
			return why
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// converge traces c until its result matches (bounded by convergeTimeout)
// and returns "" and the matching result, or the last mismatch.
func converge(prober *netnstest.Prober, c proxytest.Check) (string, proxytest.Result) {
	deadline := time.Now().Add(convergeTimeout)
	var why string
	for {
		got, err := prober.TraceSample(c.Packet, c.Want)
		if err != nil {
			why = fmt.Sprintf("%v: %v", c.Packet, err)
		} else if why = proxytest.Match(c.Want, got, true); why == "" {
			return "", got
		} else {
			why = fmt.Sprintf("%v: got %v, want %v (%s)", c.Packet, got, c.Want, why)
		}
		if time.Now().After(deadline) {
			return why, proxytest.Result{}
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// e2eMode is what differs between the engines the e2e drives the same way.
type e2eMode struct {
	// name is --proxy-mode, mode: in the config file, and /proxyMode.
	name string
	// flags are mode-specific flags (its min sync period).
	flags []string
	// config is the mode-specific part of the KubeProxyConfiguration the
	// restarted proxy reads.
	config string
	// quirks are the engine's explained differences from the table.
	quirks func(proxytest.Topology) []proxytest.Quirk
	// cleaned checks, after --cleanup, that the mode's own kernel state
	// (beyond iptables, which every mode's check covers) is gone.
	cleaned func(t *testing.T, inNS inNamespace)
	// dump lists the mode's own kernel state (beyond iptables-save and
	// ip6tables-save, which every mode's dump runs) after a failed check.
	dump [][]string
	// trace, when set, is the dataplane `trace` must name: after every
	// converged check of the scenarios, trace inside the node namespace
	// must agree with the real packets (runScenariosThroughAPI).
	trace string
}

// dumper returns what runScenariosThroughAPI logs after a failed check:
// the output of iptables-save, ip6tables-save and the mode's dump commands
// in the node namespace (a failing command's error is part of the text).
func (m e2eMode) dumper(inNS inNamespace) func() string {
	return func() string {
		var b strings.Builder
		for _, cmd := range append([][]string{{"iptables-save"}, {"ip6tables-save"}}, m.dump...) {
			var out []byte
			err := inNS(func() error {
				var err error
				out, err = exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
				return err
			})
			fmt.Fprintf(&b, "# %s\n%s", strings.Join(cmd, " "), out)
			if err != nil {
				fmt.Fprintf(&b, "# (%v)\n", err)
			}
		}
		return b.String()
	}
}

var iptablesE2EMode = e2eMode{
	name:   modeIPTables,
	flags:  []string{"--iptables-min-sync-period=100ms"},
	config: "iptables:\n  minSyncPeriod: 100ms\n",
}

// TestE2EKubeAPIServer runs the minimal-proxy binary against a real
// kube-apiserver inside the conformance topology's node namespace, drives
// the conformance scenarios through the API, checks every one with real
// connections, and restarts the proxy over its own rules, in the host's
// modes: iptables (TestE2EKubeAPIServer/<family>/iptables), then
// userspace (…/userspace). The ipvs mode is TestE2EKubeAPIServerIPVS.
//
// One cluster per IP family (etcd, kube-apiserver and the topology's
// namespaces; kube-apiserver v1.34 for IPv4 and v1.37 for IPv6, see
// e2eKubeFor) serves both modes in turn: the iptables run ends with
// --cleanup, each scenario starts from nothing but the Node. The two
// families run in parallel, in namespaces of their own, and beside the
// nftables and ipvs modes' e2e (as many at once as -test.parallel allows:
// GOMAXPROCS by default).
func TestE2EKubeAPIServer(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	t.Parallel() // beside the other modes' e2e, on control planes of their own
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			t.Parallel()
			c := startE2ECluster(t, buildE2EBinaries(t, e2eKubeFor(family)), family)
			if !t.Run(modeIPTables, func(t *testing.T) { testE2E(t, c, iptablesE2EMode) }) {
				// Whatever the failed run left must not confuse the next.
				runCleanup(t, c.inNS)
			}
			t.Run(modeUserspace, func(t *testing.T) { testE2EUserspace(t, c) })
		})
	}
}

// e2eCluster is the conformance topology in network namespaces with etcd
// and kube-apiserver in its node namespace, the Node object written, and a
// Feeder that writes scenario steps through the API.
type e2eCluster struct {
	topo   proxytest.Topology
	env    *netnstest.Env
	inNS   inNamespace
	cp     *controlPlane
	h      *apiHandlers
	feeder *proxytest.Feeder
}

func startE2ECluster(t *testing.T, bins e2eBinaries, family v1.IPFamily) *e2eCluster {
	t.Helper()
	c := &e2eCluster{topo: proxytest.DefaultTopology(family)}
	c.env = netnstest.NewEnv(t, c.topo)
	c.inNS = inNamespaceAt(t, c.env.Node.Path())

	// The API server's own ranges only hold the "kubernetes" Service; the
	// scenarios' cluster IPs come from a second ServiceCIDR (the API server
	// serves a family only when its flag has a range of that family).
	c.cp = startControlPlane(t, bins, c.inNS, "10.95.0.0/24,fd00:95::/112")
	checkKubernetesService(t, c.cp, "10.95.0.1")
	addServiceCIDR(t, c.cp, c.topo.ServiceCIDR.String())

	c.h = &apiHandlers{client: c.cp.Client}
	c.h.putNode(proxytest.MakeNode(c.topo, c.topo.Zone))
	if err := c.h.Err(); err != nil {
		t.Fatal(err)
	}
	c.feeder = proxytest.NewFeeder(c.h)
	return c
}

// proxyArgs are the flags every e2e proxy gets, then the mode's.
func (c *e2eCluster) proxyArgs(mode string, flags ...string) []string {
	return append([]string{
		"--kubeconfig=" + c.cp.Kubeconfig,
		"--hostname-override=" + c.topo.NodeName,
		"--cluster-cidr=" + c.topo.ClusterCIDR.String(),
		"--nodeport-addresses=" + proxytest.HostPrefix(c.topo.NodeIP).String(),
		"--proxy-mode=" + mode,
		// The flags of kube-proxy's usual DaemonSet command line. With
		// conntrack-max-per-core=0 the proxy leaves nf_conntrack_max (and
		// the host-wide hash table size) alone.
		"--conntrack-max-per-core=0",
		"--feature-gates=PreferSameTrafficDistribution=true",
		"--v=2",
	}, flags...)
}

// chosenScenarios is scenarios as SVCPROXY_E2E_SCENARIOS and
// SVCPROXY_E2E_REPEAT choose them, to chase one scenario's failure: the
// first (a regular expression) keeps the scenarios whose names it matches,
// the second runs those that many times over, in order. Unset, every
// scenario once.
func chosenScenarios(t *testing.T, scenarios []proxytest.Scenario) []proxytest.Scenario {
	t.Helper()
	if expr := os.Getenv("SVCPROXY_E2E_SCENARIOS"); expr != "" {
		re, err := regexp.Compile(expr)
		if err != nil {
			t.Fatalf("SVCPROXY_E2E_SCENARIOS: %v", err)
		}
		scenarios = slices.DeleteFunc(slices.Clone(scenarios), func(sc proxytest.Scenario) bool { return !re.MatchString(sc.Name) })
		if len(scenarios) == 0 {
			t.Fatalf("SVCPROXY_E2E_SCENARIOS=%s matches no scenario", expr)
		}
		t.Logf("SVCPROXY_E2E_SCENARIOS=%s: %d scenarios", expr, len(scenarios))
	}
	if v := os.Getenv("SVCPROXY_E2E_REPEAT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SVCPROXY_E2E_REPEAT=%q: want a count of at least 1", v)
		}
		var all []proxytest.Scenario
		for range n {
			all = append(all, scenarios...)
		}
		scenarios = all
	}
	return scenarios
}

// testE2E runs one mode's end-to-end test on cluster c.
func testE2E(t *testing.T, c *e2eCluster, mode e2eMode) {
	topo, env, inNS, cp, h, feeder := c.topo, c.env, c.inNS, c.cp, c.h, c.feeder
	common := c.proxyArgs(mode.name, mode.flags...)

	scenarios := proxytest.Scenarios(topo)
	if mode.quirks != nil {
		var err error
		if scenarios, err = proxytest.ApplyQuirks(scenarios, mode.quirks(topo)); err != nil {
			t.Fatal(err)
		}
	}
	scenarios = chosenScenarios(t, scenarios)
	var plain, masqueradeAll []proxytest.Scenario
	for _, sc := range scenarios {
		if sc.Options.MasqueradeAll {
			masqueradeAll = append(masqueradeAll, sc)
		} else {
			plain = append(plain, sc)
		}
	}

	p := startProxy(t, inNS, "minimal-proxy", common...)
	p.waitHealthy(t)
	if log := readFile(p.logPath); !strings.Contains(log, topo.NodeIP.String()) {
		t.Errorf("the proxy does not log the node IP %s from the Node object:\n%s", topo.NodeIP, tail(log, 20))
	}
	if code, body, err := p.get(p.metrics, "/proxyMode"); err != nil || code != 200 || body != mode.name {
		t.Fatalf("/proxyMode = %d %q %v, want 200 %q", code, body, err, mode.name)
	}
	var lt *liveTracer
	if mode.trace != "" {
		lt = &liveTracer{t: t, env: env, dataplane: mode.trace}
		t.Cleanup(func() {
			if lt.checks == 0 && !t.Skipped() {
				t.Error("trace was never compared with real packets")
			}
			t.Logf("trace agreed with real packets on %d checks (%d tool runs)", lt.checks, lt.reads)
		})
	}
	runScenariosThroughAPI(t, env, p, h, feeder, plain, mode.dumper(inNS), lt)
	if code, body, err := p.get(p.metrics, "/metrics"); err != nil || code != 200 || !strings.Contains(body, "kubeproxy_sync_proxy_rules_duration_seconds_count") {
		t.Errorf("/metrics = %d, %v; want kubeproxy_sync_proxy_rules_duration_seconds in:\n%.2000s", code, err, body)
	}

	// Restart over our own rules: the rules stay while no proxy runs and
	// the next proxy adopts them without a gap.
	keep := restartFixture(topo)
	if err := feeder.Apply(keep.Objects); err != nil {
		t.Fatal(err)
	}
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range keep.Checks {
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Fatalf("before restart, %s: %s", c.Name, why)
		}
	}
	p.stop(t)
	for _, c := range keep.Checks {
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Errorf("with the proxy stopped, %s: %s (rules must be left in place)", c.Name, why)
		}
	}
	// The restarted proxy takes its settings from a KubeProxyConfiguration
	// file instead (as kube-proxy's DaemonSet does), with one flag on top.
	config := filepath.Join(t.TempDir(), "kube-proxy.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
nodePortAddresses: [%s]
mode: %s
%slogging:
  verbosity: 2
`, cp.Kubeconfig, topo.NodeName, topo.ClusterCIDR, proxytest.HostPrefix(topo.NodeIP), mode.name, mode.config)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config=" + config}
	if len(masqueradeAll) > 0 {
		args = append(args, "--masquerade-all")
	}
	p2 := startProxy(t, inNS, "minimal-proxy-restarted", args...)
	for _, c := range keep.Checks {
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Errorf("while the restarted proxy starts, %s: %s", c.Name, why)
		}
	}
	p2.waitHealthy(t)
	if code, body, err := p2.get(p2.metrics, "/proxyMode"); err != nil || code != 200 || body != mode.name {
		t.Errorf("restarted from the config file: /proxyMode = %d %q %v, want 200 %q", code, body, err, mode.name)
	}
	for _, c := range keep.Checks {
		// The restarted proxy runs with the new flags: under
		// --masquerade-all, pod traffic to a cluster IP is masqueraded too.
		c.Want.Masquerade = c.Want.Masquerade || len(masqueradeAll) > 0
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Errorf("after the restarted proxy synced, %s: %s", c.Name, why)
		}
	}
	runScenariosThroughAPI(t, env, p2, h, feeder, masqueradeAll, mode.dumper(inNS), lt)

	// --cleanup after the proxy stopped: what the mode left is gone, so
	// the survivor's cluster IP is no longer proxied.
	if err := feeder.Apply(keep.Objects); err != nil {
		t.Fatal(err)
	}
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range keep.Checks {
		c.Want.Masquerade = c.Want.Masquerade || len(masqueradeAll) > 0
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Fatalf("before --cleanup, %s: %s", c.Name, why)
		}
	}
	p2.stop(t)
	runCleanup(t, inNS)
	checkNoKubeRules(t, inNS)
	if mode.cleaned != nil {
		mode.cleaned(t, inNS)
	}
	for _, c := range keep.Checks {
		c.Want = proxytest.Result{Verdict: proxytest.NotProxied}
		if why, _ := converge(env.Prober(), c); why != "" {
			t.Errorf("after --cleanup, %s: %s", c.Name, why)
		}
	}
}

// runCleanup runs minimal-proxy --cleanup in the namespace and checks it
// exits 0 (bounded).
func runCleanup(t *testing.T, inNS inNamespace) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "cleanup.log")
	p := startProcess(t, inNS, "minimal-proxy --cleanup", logPath, buildProxyBinary(t), "--cleanup", "--v=1")
	if !p.wait(slowdown(time.Minute)) {
		t.Fatalf("--cleanup still running after %v:\n%s", slowdown(time.Minute), tail(readFile(logPath), 30))
	}
	if p.err != nil {
		t.Fatalf("--cleanup: %v\n%s", p.err, tail(readFile(logPath), 30))
	}
}

// checkNoKubeRules fails when any iptables backend and family present
// still has a KUBE- chain or rule in the namespace.
func checkNoKubeRules(t *testing.T, inNS inNamespace) {
	t.Helper()
	for _, save := range []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		out := commandIn(t, inNS, save)
		if strings.Contains(out, "KUBE-") {
			t.Errorf("%s: KUBE- chains or rules left after --cleanup:\n%s", save, out)
		}
	}
}

// commandIn runs a command in the namespace and returns its output,
// failing the test when it fails.
func commandIn(t *testing.T, inNS inNamespace, name string, args ...string) string {
	t.Helper()
	var out []byte
	err := inNS(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// restartFixture is one ClusterIP service with a local and a remote
// backend, reached from a pod, used across the proxy restart.
func restartFixture(topo proxytest.Topology) proxytest.Step {
	vip := topo.ServiceIP(200)
	a1, b1 := topo.LocalPods[0], topo.RemotePods[0]
	svc := proxytest.MakeService(topo, "survivor", vip, []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
	slice := proxytest.MakeSlice(topo, "survivor", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}},
		proxytest.EndpointSpec{Pod: a1, State: proxytest.Ready}, proxytest.EndpointSpec{Pod: b1, State: proxytest.Ready})
	return proxytest.Step{
		Name:    "survivor",
		Objects: proxytest.Objects{Services: []*v1.Service{svc}, EndpointSlices: []*discovery.EndpointSlice{slice}, Node: proxytest.MakeNode(topo, topo.Zone)},
		Checks: []proxytest.Check{{
			Name:   "pod to survivor cluster IP",
			Packet: proxytest.FromPodTo(topo, vip, 80),
			Want:   proxytest.ForwardedTo(false, proxytest.Backends(8080, a1, b1)...),
		}},
	}
}
