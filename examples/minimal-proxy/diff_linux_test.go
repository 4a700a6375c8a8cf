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
// a stale per-service chain is listed for deletion.
func TestDiffAfterSync(t *testing.T) {
	skipUnlessRoot(t)
	_, inNS := newNamespace(t)
	bin := buildProxyBinary(t)
	p := &proxyProcess{inNS: inNS, healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249"}
	p.logPath = filepath.Join(t.TempDir(), "proxy.log")
	p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, bin,
		"--objects-file=demo.yaml", "--proxy-mode=iptables",
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
			out, err = exec.Command(bin, "diff", "--objects-file=demo.yaml", "--proxy-mode=iptables").Output()
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

	// A hand edit: one service chain loses its rules; a stale chain appears.
	nat := commandIn(t, inNS, "iptables-save", "-t", "nat")
	svc := regexp.MustCompile(`(?m)^:(KUBE-SVC-[A-Z0-9]+) `).FindStringSubmatch(nat)
	if svc == nil {
		t.Fatalf("no KUBE-SVC chain after the sync:\n%s", nat)
	}
	commandIn(t, inNS, "iptables", "-t", "nat", "-F", svc[1])
	commandIn(t, inNS, "iptables", "-t", "nat", "-N", "KUBE-SEP-STALEBYHAND")
	out, code := diff()
	if code != exitDiffers {
		t.Fatalf("diff after a hand edit: exit %d, want %d; printed:\n%s", code, exitDiffers, out)
	}
	for _, want := range []string{
		"iptables -t nat -F " + svc[1] + "\n",
		"iptables -t nat -A " + svc[1] + " ",
		"iptables -t nat -X KUBE-SEP-STALEBYHAND\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff after a hand edit lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 12 {
		t.Errorf("diff after a hand edit of one chain printed %d commands:\n%s", n, out)
	}
}
