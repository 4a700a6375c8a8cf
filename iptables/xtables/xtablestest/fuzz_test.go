package xtablestest

import (
	"net/netip"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// FuzzRestore: any input either fails cleanly or yields a state whose
// Dump seeds an identical Fake; tracing never panics.
func FuzzRestore(f *testing.F) {
	// Small seeds only: coverage-guided mutation of the 11 KB kube-proxy
	// fixture stalls the fuzzing engine.
	b, err := os.ReadFile("testdata/kubeproxy-style.restore")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	for _, tc := range differentialCases {
		for _, in := range tc.inputs {
			if len(in) < 2000 {
				f.Add(in)
			}
		}
	}
	f.Add("*filter\n-A INPUT -p tcp -m comment --comment \"a \\\"b\\\"\" --dport 1:2 ! -s 1.2.3.0/24 -j REJECT\nCOMMIT\n")
	f.Fuzz(func(t *testing.T, input string) {
		fake := NewFake(v1.IPv4Protocol)
		if err := fake.Restore(ctx, xtables.RestoreInput{Text: []byte(input)}); err != nil {
			return
		}
		dump := fake.Dump()
		again, err := NewFakeFromDump(v1.IPv4Protocol, dump)
		if err != nil {
			t.Fatalf("Dump does not restore: %v\n%s", err, dump)
		}
		if again.Dump() != dump {
			t.Fatalf("Dump does not round-trip:\n%s\nvs\n%s", dump, again.Dump())
		}
		tr := NewTracer(fake, TracerConfig{NodeIPs: []netip.Addr{nodeIP}, SourcePort: 40000})
		for _, o := range []proxytest.Origin{proxytest.FromExternal, proxytest.FromPod, proxytest.FromNode} {
			_, _ = tr.TraceAll(pkt(o, "10.1.0.1", "10.2.0.1", 80))
		}
	})
}
