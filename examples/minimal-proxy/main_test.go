package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// testBinDir holds what the tests of this run build (the minimal-proxy
// binary); TestMain removes it at the end. Readable by every user, so a
// test can run the binary unprivileged.
var testBinDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "minimal-proxy-test-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "minimal-proxy tests:", err)
		os.Exit(2)
	}
	testBinDir = dir
	flag.Parse()
	// The kernel tests and the e2e get an xtables lock of their own, never
	// the host's (netnstest.Main).
	code := netnstest.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// runInProcess runs the binary's run with args and returns its exit code,
// stdout and stderr.
func runInProcess(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDryRunDemo is the README's first command: the demo objects, planned
// by the iptables engine, printed, nothing touched (it runs unprivileged).
func TestDryRunDemo(t *testing.T) {
	code, out, errOut := runInProcess(t, context.Background(),
		"--objects-file", "demo.yaml", "--dry-run", "--cluster-cidr", "10.244.0.0/16")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"# minimal-proxy dry run: mode iptables, node node-a, node IPs [192.168.1.10]",
		"*nat", "*filter", "COMMIT",
		// ClusterIP, external IP.
		`-A KUBE-SERVICES -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 10.96.10.10 --dport 80 -j KUBE-SVC-`,
		`-A KUBE-SERVICES -m comment --comment "default/web:http external IP" -m tcp -p tcp -d 192.0.2.50 --dport 80 -j KUBE-EXT-`,
		"-j DNAT --to-destination 10.244.1.2:8080",
		"-j DNAT --to-destination 10.244.2.2:8080",
		// NodePort.
		"-A KUBE-NODEPORTS -m comment --comment default/shop:http -m tcp -p tcp --dport 30080 -j KUBE-EXT-",
		// LoadBalancer with source ranges: the firewall chain and its drop.
		`-A KUBE-SERVICES -m comment --comment "default/api:https loadbalancer IP" -m tcp -p tcp -d 203.0.113.10 --dport 443 -j KUBE-FW-`,
		"-s 198.51.100.0/24 -j KUBE-EXT-",
		`-A KUBE-PROXY-FIREWALL -m comment --comment "default/api:https traffic not accepted by KUBE-FW-`,
		// eTP Local: only node-a's pod in the local chain, health-check port open.
		`-A KUBE-SVL-FYLGM62JFGZEKHFX -m comment --comment "default/ingress:http -> 10.244.1.5:80" -j KUBE-SEP-`,
		`-A KUBE-NODEPORTS -m comment --comment "default/ingress:http health check node port" -m tcp -p tcp --dport 32000 -j ACCEPT`,
		// Pods of the cluster CIDR are short-circuited to the cluster chain.
		"-s 10.244.0.0/16 -j KUBE-SVC-FYLGM62JFGZEKHFX",
		// ClientIP affinity, UDP and TCP.
		"-m recent --name KUBE-SEP-",
		"--rcheck --seconds 600 --reap",
		`"kube-system/dns:dns cluster IP" -m udp -p udp -d 10.96.0.10 --dport 53`,
		`"kube-system/dns:dns-tcp cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 53`,
		// No ready endpoint: rejected.
		`-A KUBE-SERVICES -m comment --comment "default/broken:http has no endpoints" -m tcp -p tcp -d 10.96.10.14 --dport 80 -j REJECT`,
		// Masquerading.
		"-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	// The not-ready endpoint of default/broken never becomes a backend.
	if strings.Contains(out, "10.244.2.7") {
		t.Errorf("dry run programs the not-ready endpoint 10.244.2.7")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// A dry run is deterministic: same objects, same text.
func TestDryRunDeterministic(t *testing.T) {
	_, a, _ := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run")
	_, b, _ := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run")
	if a != b || a == "" {
		t.Errorf("two dry runs differ (or are empty):\n%s\n---\n%s", a, b)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: default}\nspec:\n  ports: [{port: \"eighty\"}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: ok, namespace: default}\nspec:\n  clusterIP: 10.96.0.5\n  ports: [{port: 80}]\n")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"bad flag value", []string{"--iptables-masquerade-bit=99"}, exitUsage, []string{"iptables.masqueradeBit"}},
		{"missing objects file", []string{"--objects-file=/nonexistent/objects.yaml", "--dry-run"}, exitFailed, []string{"--objects-file", "/nonexistent/objects.yaml"}},
		{"malformed objects file", []string{"--objects-file=" + bad, "--dry-run"}, exitFailed, []string{"--objects-file", bad, "document"}},
		{"missing kubeconfig", []string{"--kubeconfig=/nonexistent/kubeconfig", "--dry-run"}, exitFailed, []string{"--kubeconfig", "/nonexistent/kubeconfig"}},
		{"help", []string{"--help"}, exitOK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runInProcess(t, context.Background(), tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr does not mention %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "panic") {
				t.Errorf("stderr shows a panic:\n%s", errOut)
			}
			// Each error is printed once.
			if tc.wantCode != exitOK && strings.Count(errOut, tc.want[len(tc.want)-1]) != 1 {
				t.Errorf("%q printed %d times, want once:\n%s", tc.want[len(tc.want)-1], strings.Count(errOut, tc.want[len(tc.want)-1]), errOut)
			}
		})
	}
}

func TestChooseMode(t *testing.T) {
	noIPVS := errors.New("no ip_vs")
	oldIPT := errors.New("iptables 1.4.0 is older than 1.4.11")
	ok := func() error { return nil }
	fail := func(err error) func() error { return func() error { return err } }
	for _, tc := range []struct {
		requested string
		ipvs      func() error
		iptables  func() error
		want      string
	}{
		{"", ok, ok, modeIPTables},
		{"iptables", ok, ok, modeIPTables},
		{"ipvs", ok, ok, modeIPVS},
		{"ipvs", fail(noIPVS), ok, modeIPTables},
		{"ipvs", fail(noIPVS), fail(oldIPT), modeUserspace},
		{"iptables", ok, fail(oldIPT), modeUserspace},
		{"userspace", fail(noIPVS), fail(oldIPT), modeUserspace},
	} {
		var logs bytes.Buffer
		got := chooseMode(tc.requested, modeProbes{ipvs: tc.ipvs, iptables: tc.iptables}, newLogger(&logs, &logs, LoggingConfig{}))
		if got != tc.want {
			t.Errorf("chooseMode(%q) = %q, want %q", tc.requested, got, tc.want)
		}
		if got != tc.requested && tc.requested != "" && !strings.Contains(logs.String(), "falling back") {
			t.Errorf("chooseMode(%q) fell back to %q without logging why: %q", tc.requested, got, logs.String())
		}
	}
}

func TestParseIPTablesVersion(t *testing.T) {
	for in, want := range map[string][3]int{
		"iptables v1.8.9 (nf_tables)\n":     {1, 8, 9},
		"iptables v1.4.21":                  {1, 4, 21},
		"ip6tables-legacy v1.8.10 (legacy)": {1, 8, 10},
		"iptables v1.6":                     {1, 6, 0},
	} {
		got, err := parseIPTablesVersion(in)
		if err != nil || got != want {
			t.Errorf("parseIPTablesVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseIPTablesVersion("command not found"); err == nil {
		t.Error("parseIPTablesVersion accepted garbage")
	}
}

func TestNodeAddresses(t *testing.T) {
	node := &v1.Node{Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeHostName, Address: "node-a"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: v1.NodeInternalIP, Address: "fd00::5"},
		{Type: v1.NodeInternalIP, Address: "192.168.1.5"},
		{Type: v1.NodeInternalIP, Address: "192.168.1.6"},
	}}}
	for _, tc := range []struct {
		node *v1.Node
		bind string
		want []netip.Addr
	}{
		{node, "0.0.0.0", []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("192.168.1.5")}},
		{node, "10.0.0.1", []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
		{nil, "0.0.0.0", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	} {
		got := nodeAddresses(tc.node, tc.bind, logr.Discard())
		if len(got) != len(tc.want) {
			t.Errorf("nodeAddresses(bind %s) = %v, want %v", tc.bind, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("nodeAddresses(bind %s) = %v, want %v", tc.bind, got, tc.want)
			}
		}
	}
}

var _ = io.Discard

func TestDryRunDetectLocalNodeCIDR(t *testing.T) {
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run", "--detect-local-mode", "NodeCIDR")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	// demo.yaml's node has podCIDR 10.244.1.0/24: cluster IP traffic from
	// elsewhere is masqueraded.
	if !strings.Contains(out, "! -s 10.244.1.0/24 -j KUBE-MARK-MASQ") {
		t.Errorf("no NodeCIDR local detection in:\n%s", out)
	}
	noCIDR := writeFile(t, "objects.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n")
	code, _, errOut = runInProcess(t, context.Background(), "--objects-file", noCIDR, "--dry-run", "--detect-local-mode", "NodeCIDR")
	if code != exitFailed || !strings.Contains(errOut, "podCIDR") {
		t.Errorf("exit %d, want %d naming the missing podCIDR:\n%s", code, exitFailed, errOut)
	}
}

// A dry run against an API server where nothing listens gives up after
// its bounded wait with an error that says so.
func TestDryRunUnreachableAPIServer(t *testing.T) {
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: x}
contexts:
- name: c
  context: {cluster: dead, user: u}
current-context: c
`)
	o, err := parseOptions([]string{"--kubeconfig=" + kubeconfig, "--hostname-override=node-x", "--dry-run"}, "linux", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.dryRunAPIWait = 2 * time.Second
	start := time.Now()
	err = serve(context.Background(), o, io.Discard, logr.Discard())
	if err == nil || !strings.Contains(err.Error(), "did not deliver") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("serve = %v, want the bounded-wait error", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("gave up after %v, want about 2s", took)
	}
}

// A file written as one would for the API server, without the fields it
// defaults (port protocols, session affinity, traffic policies), plans the
// same rules as with them spelled out: no "-m  -p" rules.
func TestDryRunDefaultsLikeTheAPIServer(t *testing.T) {
	terse := writeFile(t, "terse.yaml", `apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.168.1.10}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.10.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.2]}]
ports: [{name: http, port: 8080}]
`)
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file="+terse, "--dry-run")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if strings.Contains(out, "-m  -p") || !strings.Contains(out, "-m tcp -p tcp -d 10.96.10.10 --dport 80") ||
		!strings.Contains(out, "-j DNAT --to-destination 10.244.1.2:8080") {
		t.Errorf("dry run of a file without protocols:\n%s", out)
	}
}

// --iptables-legacy-restore-tool reaches the iptables Runner's config of
// every mode that builds one; without it the Runner may restore in process.
func TestLegacyRestoreToolFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--iptables-legacy-restore-tool"}, true}} {
		o, err := parseOptions(tc.args, "linux", io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p := engineParams{opts: o}
		if got := p.runnerConfig(v1.IPv6Protocol); got.LegacyTool != tc.want || got.Family != v1.IPv6Protocol {
			t.Errorf("%v: runnerConfig = %+v, want LegacyTool %v for IPv6", tc.args, got, tc.want)
		}
	}
}

// --nftables-netlink (default true) is the negation of
// nftables.Config.NFTOnly.
func TestNFTablesNetlinkFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		nftOnly bool
	}{{nil, false}, {[]string{"--nftables-netlink"}, false}, {[]string{"--nftables-netlink=false"}, true}} {
		o, err := parseOptions(tc.args, "linux", io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.nftOnly != tc.nftOnly {
			t.Errorf("%v: nftOnly = %v, want %v", tc.args, o.nftOnly, tc.nftOnly)
		}
	}
}
