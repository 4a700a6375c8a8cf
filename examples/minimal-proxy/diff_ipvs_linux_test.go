package main

import (
	"bytes"
	"context"
	_ "embed"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
)

// demoObjects is demo.yaml, for the qemu guest, which has only testdata.
//
//go:embed demo.yaml
var demoObjects []byte

// TestDiffKernelIPVS: the IPVS engine, configured as the binary configures
// it for demo.yaml, syncs a namespace; diff there (runDiff, in this
// process, on the namespace's thread) prints nothing and exits 0. After a
// real server is deleted, a stray virtual server added on a stray
// kube-ipvs0 address and a chain flushed by hand, it prints the commands
// that repair each and exits 3. It needs a kernel with IPVS: the qemu
// guest of TestE2EKubeAPIServerIPVS runs it (hack/vmtest/run-e2e-ipvs.sh);
// elsewhere it skips.
func TestDiffKernelIPVS(t *testing.T) {
	if testing.Short() {
		t.Skip("a kernel test; skipped with -short")
	}
	skipUnlessRoot(t)
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Skip("this kernel has no IPVS: TestE2EKubeAPIServerIPVS runs this test in its qemu guest (hack/vmtest/run-e2e-ipvs.sh)")
	}
	ctx := context.Background()
	objects := filepath.Join(t.TempDir(), "demo.yaml")
	if err := os.WriteFile(objects, demoObjects, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--objects-file=" + objects, "--proxy-mode=ipvs"}
	o, err := parseOptions(args, runtime.GOOS, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, nodeName, err := newSource(o, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	node, err := src.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ep := engineParams{mode: modeIPVS, opts: o, nodeName: nodeName, node: node, log: logr.Discard(), nodeIPs: nodeAddresses(node, "", logr.Discard())}
	vcfg, _, err := ipvsConfig(ep, v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	_, inNS := newNamespace(t)
	var p *ipvs.Proxier
	err = inNS(func() error {
		ifs := ipvs.Interfaces{Sysctl: ipvskernel.NewSysctl()}
		var err error
		if ifs.IPVS, err = ipvskernel.New(ipvskernel.Options{}); err != nil {
			return err
		}
		if ifs.IPSet, err = ipvskernel.NewIPSet(ipvskernel.Options{}); err != nil {
			return err
		}
		if ifs.Netlink, err = ipvskernel.NewNetlink(ipvskernel.Options{}); err != nil {
			return err
		}
		if ifs.IPTables, err = xtables.New(ep.runnerConfig(v1.IPv4Protocol)); err != nil {
			return err
		}
		vcfg.Conntrack = conntrack.New()
		if p, err = ipvs.NewProxier(vcfg, ifs); err != nil {
			return err
		}
		if err := src.load(ctx, p); err != nil {
			return err
		}
		return p.Sync(ctx)
	})
	if p != nil {
		t.Cleanup(func() { _ = p.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}

	diff := func() (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := 0
		if err := inNS(func() error {
			code = runDiff(ctx, args, &out, &errb)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if code != exitOK && code != exitDiffers {
			t.Fatalf("diff exited %d: %s", code, errb.String())
		}
		return out.String(), code
	}
	if out, code := diff(); code != exitOK || out != "" {
		t.Fatalf("diff right after a sync: exit %d, printed:\n%s", code, out)
	}

	commandIn(t, inNS, "ipvsadm", "-d", "-t", "10.96.10.10:80", "-r", "10.244.1.2:8080")
	commandIn(t, inNS, "ip", "addr", "add", "10.96.99.99/32", "dev", ipvs.DummyDevice)
	commandIn(t, inNS, "ipvsadm", "-A", "-t", "10.96.99.99:80", "-s", "rr")
	commandIn(t, inNS, "iptables", "-t", "nat", "-F", "KUBE-SERVICES")
	out, code := diff()
	if code != exitDiffers {
		t.Fatalf("diff after a hand edit: exit %d, want %d; printed:\n%s", code, exitDiffers, out)
	}
	for _, want := range []string{
		"ipvsadm -a -t 10.96.10.10:80 -r 10.244.1.2:8080 -m -w 1\n",
		"ipvsadm -D -t 10.96.99.99:80\n",
		"ip addr del 10.96.99.99/32 dev kube-ipvs0\n",
		"iptables -t nat -F KUBE-SERVICES\n",
		"iptables -t nat -A KUBE-SERVICES ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff after a hand edit lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 14 {
		t.Errorf("diff after a hand edit printed %d commands:\n%s", n, out)
	}
	t.Logf("diff after the hand edit:\n%s", out)
}
