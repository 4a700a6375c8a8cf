package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDiffAfterSync runs the binary on demo.yaml in a namespace of its
// own until it has synced, stops it (the rules stay), and runs "diff"
// with the same flags: nothing printed, exit 0. After a hand edit of one
// service chain, diff prints the commands that put it back and exits 3;
// a stale per-service chain is listed for deletion. In the iptables and
// the nftables mode.
func TestDiffAfterSync(t *testing.T) {
	skipUnlessRoot(t)
	t.Run("iptables", func(t *testing.T) {
		testDiffAfterSync(t, modeIPTables, func(inNS inNamespace) []string {
			nat := commandIn(t, inNS, "iptables-save", "-t", "nat")
			svc := regexp.MustCompile(`(?m)^:(KUBE-SVC-[A-Z0-9]+) `).FindStringSubmatch(nat)
			if svc == nil {
				t.Fatalf("no KUBE-SVC chain after the sync:\n%s", nat)
			}
			commandIn(t, inNS, "iptables", "-t", "nat", "-F", svc[1])
			commandIn(t, inNS, "iptables", "-t", "nat", "-N", "KUBE-SEP-STALEBYHAND")
			return []string{
				"iptables -t nat -F " + svc[1] + "\n",
				"iptables -t nat -A " + svc[1] + " ",
				"iptables -t nat -X KUBE-SEP-STALEBYHAND\n",
			}
		})
	})
	t.Run("nftables", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skipf("nft is not installed: %v", err)
		}
		testDiffAfterSync(t, modeNFTables, func(inNS inNamespace) []string {
			chains := commandIn(t, inNS, "nft", "list", "table", "ip", nftTableName)
			svc := regexp.MustCompile(`chain (service-[A-Z0-9]+-default/web/tcp/http) `).FindStringSubmatch(chains)
			if svc == nil {
				t.Fatalf("no service chain of default/web after the sync:\n%s", chains)
			}
			commandIn(t, inNS, "nft", "flush", "chain", "ip", nftTableName, svc[1])
			commandIn(t, inNS, "nft", "add", "chain", "ip", nftTableName, "stale-by-hand")
			commandIn(t, inNS, "nft", "delete", "element", "ip", nftTableName, "service-ips", "{ 10.96.10.10 . tcp . 80 }")
			return []string{
				"nft 'flush chain ip kube-proxy " + svc[1] + "'\n",
				"nft 'add rule ip kube-proxy " + svc[1] + " ",
				"nft 'add element ip kube-proxy service-ips { 10.96.10.10 . tcp . 80 : goto service-",
				"nft 'delete chain ip kube-proxy stale-by-hand'\n",
			}
		})
	})
}

// testDiffAfterSync: edit changes the node's rules by hand and returns
// what diff must print then.
func testDiffAfterSync(t *testing.T, mode string, edit func(inNamespace) []string) {
	_, inNS := newNamespace(t)
	bin := buildProxyBinary(t)
	p := &proxyProcess{inNS: inNS, healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249"}
	p.logPath = filepath.Join(t.TempDir(), "proxy.log")
	p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, bin,
		"--objects-file=demo.yaml", "--proxy-mode="+mode,
		"--healthz-bind-address="+p.healthz, "--metrics-bind-address="+p.metrics)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", tail(readFile(p.logPath), 30))
		}
	})
	p.waitHealthy(t)
	p.stop(t)

	diff := func() (string, int) {
		t.Helper()
		var out []byte
		code := 0
		err := inNS(func() error {
			var err error
			out, err = exec.Command(bin, "diff", "--objects-file=demo.yaml", "--proxy-mode="+mode).Output()
			return err
		})
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if code != exitDiffers {
				t.Fatalf("diff exited %d: %s", code, ee.Stderr)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := diff(); code != 0 || out != "" {
		t.Fatalf("diff right after a sync: exit %d, printed:\n%s", code, out)
	}

	wants := edit(inNS)
	out, code := diff()
	if code != exitDiffers {
		t.Fatalf("diff after a hand edit: exit %d, want %d; printed:\n%s", code, exitDiffers, out)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("diff after a hand edit lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 12 {
		t.Errorf("diff after a hand edit of one chain printed %d commands:\n%s", n, out)
	}
	t.Logf("diff after the hand edit:\n%s", out)
}
