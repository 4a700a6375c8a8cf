package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestUnreachableAPIServer runs the binary against an API server address
// where nothing listens: it keeps retrying with a clear log line, /healthz
// answers 503 (never synced), and SIGTERM stops it cleanly with status 0.
// It runs in a namespace of its own (as root).
func TestUnreachableAPIServer(t *testing.T) {
	// A real run needs CAP_NET_ADMIN; without it the binary refuses at
	// once (TestBinaryWithoutPrivileges).
	skipUnlessRoot(t)
	_, inNS := newNamespace(t)
	dead := freePort(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: x}
contexts:
- name: c
  context: {cluster: dead, user: u}
current-context: c
`, dead)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proxyProcess{inNS: inNS, healthz: fmt.Sprintf("127.0.0.1:%d", freePort(t)), metrics: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	p.logPath = filepath.Join(t.TempDir(), "proxy.log")
	p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, buildProxyBinary(t),
		"--kubeconfig="+kubeconfig, "--hostname-override=node-x",
		"--healthz-bind-address="+p.healthz, "--metrics-bind-address="+p.metrics)

	// Bounded wait for the retry log line and a 503 from /healthz.
	deadline := time.Now().Add(30 * time.Second)
	var sawLog, saw503 bool
	var last string
	for time.Now().Before(deadline) && !(sawLog && saw503) {
		if p.exited() {
			t.Fatalf("exited (%v) while the API server is unreachable:\n%s", p.err, tail(readFile(p.logPath), 30))
		}
		sawLog = strings.Contains(readFile(p.logPath), "Cannot reach the API server")
		code, body, err := p.get(p.healthz, "/healthz")
		last = fmt.Sprintf("%d %s %v", code, body, err)
		saw503 = saw503 || code == http.StatusServiceUnavailable
		time.Sleep(200 * time.Millisecond)
	}
	if !sawLog {
		t.Errorf("no \"Cannot reach the API server\" log line:\n%s", tail(readFile(p.logPath), 30))
	}
	if !saw503 {
		t.Errorf("/healthz never answered 503 while unsynced (last: %s)", last)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.wait(stopTimeout) {
		t.Fatalf("still running %v after SIGTERM", stopTimeout)
	}
	if p.err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", p.err, tail(readFile(p.logPath), 30))
	}
	if log := readFile(p.logPath); strings.Contains(log, "panic") {
		t.Errorf("log shows a panic:\n%s", log)
	}
}

// TestCleanup seeds a fresh namespace with what kube-proxy's iptables
// mode leaves behind (in both iptables backends) plus a chain of someone
// else's, runs the binary with --cleanup there, and checks it exits 0
// having removed only the former.
func TestCleanup(t *testing.T) {
	skipUnlessRoot(t)
	_, inNS := newNamespace(t)
	leftovers := `*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
:SOMEONE-ELSES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:8080
-A SOMEONE-ELSES -j RETURN
-A PREROUTING -j SOMEONE-ELSES
COMMIT
`
	backends := map[string][2]string{
		"legacy": {"iptables-legacy-restore", "iptables-legacy-save"},
		"nft":    {"iptables-nft-restore", "iptables-nft-save"},
	}
	for name, bins := range backends {
		if _, err := exec.LookPath(bins[0]); err != nil {
			t.Logf("no %s: not seeding the %s backend", bins[0], name)
			delete(backends, name)
			continue
		}
		err := inNS(func() error {
			cmd := exec.Command(bins[0])
			cmd.Stdin = strings.NewReader(leftovers)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v: %s", bins[0], err, out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(backends) == 0 {
		t.Skip("skipping: neither iptables-legacy nor iptables-nft is installed")
	}

	logPath := filepath.Join(t.TempDir(), "cleanup.log")
	p := startProcess(t, inNS, "minimal-proxy --cleanup", logPath, buildProxyBinary(t), "--cleanup", "--v=1")
	if !p.wait(time.Minute) {
		t.Fatalf("--cleanup still running after a minute:\n%s", tail(readFile(logPath), 30))
	}
	if p.err != nil {
		t.Fatalf("--cleanup: %v\n%s", p.err, tail(readFile(logPath), 30))
	}
	for name, bins := range backends {
		var out []byte
		err := inNS(func() error {
			var err error
			out, err = exec.Command(bins[1], "-t", "nat").CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v: %s", bins[1], err, out)
		}
		dump := string(out)
		if strings.Contains(dump, "KUBE-") {
			t.Errorf("%s backend: KUBE- chains or rules left after --cleanup:\n%s", name, dump)
		}
		if !strings.Contains(dump, ":SOMEONE-ELSES") || !strings.Contains(dump, "-A PREROUTING -j SOMEONE-ELSES") {
			t.Errorf("%s backend: --cleanup removed someone else's chain or rule:\n%s", name, dump)
		}
	}
}

// TestObjectsFileRun runs the binary (root, in a namespace of its own) on
// an objects file: it becomes healthy, programs the file's services, and
// follows edits of the file.
func TestObjectsFileRun(t *testing.T) {
	skipUnlessRoot(t)
	_, inNS := newNamespace(t)
	objects := filepath.Join(t.TempDir(), "objects.yaml")
	one := strings.SplitN(multiNetworkObjects, "\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: theirs", 2)[0]
	if err := os.WriteFile(objects, []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &proxyProcess{inNS: inNS, healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249"}
	p.logPath = filepath.Join(t.TempDir(), "proxy.log")
	p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, buildProxyBinary(t),
		"--objects-file="+objects, "--healthz-bind-address="+p.healthz, "--metrics-bind-address="+p.metrics,
		"--iptables-min-sync-period=100ms", "--v=2")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", tail(readFile(p.logPath), 40))
		}
	})
	p.waitHealthy(t)
	if code, body, err := p.get(p.metrics, "/proxyMode"); err != nil || code != 200 || body != modeIPTables {
		t.Errorf("/proxyMode = %d %q %v", code, body, err)
	}
	natRules := func() string {
		var out []byte
		_ = inNS(func() error {
			var err error
			out, err = exec.Command("iptables-save", "-t", "nat").CombinedOutput()
			return err
		})
		return string(out)
	}
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond(natRules()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 20s:\n%s", what, natRules())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor("default/mine programmed", func(s string) bool { return strings.Contains(s, "-d 10.96.20.1/32") })

	// Add default/net2 (an unlabelled service) by rewriting the file.
	if err := os.WriteFile(objects, []byte(multiNetworkObjects), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("default/net2 programmed after the file changed", func(s string) bool { return strings.Contains(s, "-d 10.96.20.3/32") })
	if s := natRules(); strings.Contains(s, "10.96.20.2") {
		t.Errorf("default/theirs (another proxy's) programmed:\n%s", s)
	}
	p.stop(t)
}

// TestModes runs the binary (root, a namespace each) in each mode on
// demo.yaml: the requested ipvs mode falls back to iptables on a kernel
// without IPVS (logged), and /proxyMode reports the mode in use; every
// mode becomes healthy and stops cleanly on SIGTERM.
func TestModes(t *testing.T) {
	skipUnlessRoot(t)
	ipvsErr := probeIPVS("")()
	for _, tc := range []struct{ requested, want string }{
		{modeIPTables, modeIPTables},
		{modeIPVS, map[bool]string{true: modeIPVS, false: modeIPTables}[ipvsErr == nil]},
		{modeUserspace, modeUserspace},
	} {
		t.Run(tc.requested, func(t *testing.T) {
			_, inNS := newNamespace(t)
			p := &proxyProcess{inNS: inNS, healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249"}
			p.logPath = filepath.Join(t.TempDir(), "proxy.log")
			p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, buildProxyBinary(t),
				"--objects-file=demo.yaml", "--proxy-mode="+tc.requested,
				"--healthz-bind-address="+p.healthz, "--metrics-bind-address="+p.metrics)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("proxy log:\n%s", tail(readFile(p.logPath), 30))
				}
			})
			p.waitHealthy(t)
			if code, body, err := p.get(p.healthz, "/livez"); err != nil || code != 200 || !strings.Contains(body, `"healthy":true`) {
				t.Errorf("/livez = %d %q %v, want 200 and healthy", code, body, err)
			}
			if code, body, err := p.get(p.metrics, "/proxyMode"); err != nil || code != 200 || body != tc.want {
				t.Errorf("/proxyMode = %d %q %v, want %q", code, body, err, tc.want)
			}
			if tc.want != tc.requested && !strings.Contains(readFile(p.logPath), "falling back to "+tc.want) {
				t.Errorf("fell back from %s to %s without logging why", tc.requested, tc.want)
			}
			p.stop(t)
		})
	}
}

// TestDryRunTouchesNothing runs --dry-run as root in a fresh namespace (for
// each mode with a plan) and checks that no iptables rule, chain or link
// appeared there.
func TestDryRunTouchesNothing(t *testing.T) {
	skipUnlessRoot(t)
	for _, mode := range []string{modeIPTables, modeIPVS} {
		t.Run(mode, func(t *testing.T) {
			_, inNS := newNamespace(t)
			snapshot := func() string {
				var out []byte
				_ = inNS(func() error {
					a, _ := exec.Command("iptables-save").CombinedOutput()
					b, _ := exec.Command("iptables-legacy-save").CombinedOutput()
					c, _ := exec.Command("ip", "-o", "link").CombinedOutput()
					out = append(append(a, b...), c...)
					return nil
				})
				// iptables-save stamps times; compare the rest.
				var keep []string
				for _, l := range strings.Split(string(out), "\n") {
					if !strings.HasPrefix(l, "#") {
						keep = append(keep, l)
					}
				}
				return strings.Join(keep, "\n")
			}
			before := snapshot()
			logPath := filepath.Join(t.TempDir(), "dry-run.log")
			p := startProcess(t, inNS, "minimal-proxy --dry-run", logPath, buildProxyBinary(t),
				"--objects-file=demo.yaml", "--dry-run", "--proxy-mode="+mode)
			if !p.wait(time.Minute) || p.err != nil {
				t.Fatalf("--dry-run: %v\n%s", p.err, tail(readFile(logPath), 20))
			}
			if !strings.Contains(readFile(logPath), "KUBE-SERVICES") {
				t.Errorf("--dry-run printed no plan:\n%s", tail(readFile(logPath), 20))
			}
			if after := snapshot(); after != before {
				t.Errorf("--dry-run changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
