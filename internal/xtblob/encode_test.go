package xtblob_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/xtblob"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func TestAppendRuleRef(t *testing.T) {
	for _, tc := range []struct {
		fam          xtblob.Family
		rule         string
		jump         string
		isGoto       bool
		fallsThrough bool
		verdict      int32 // for builtin verdicts
		standard     bool
	}{
		{xtblob.IPv4, `-m comment --comment "ns/svc:p" -j KUBE-SVC-X`, "KUBE-SVC-X", false, false, 0, true},
		{xtblob.IPv4, `-d 10.0.0.1/32 -g KUBE-SEP-Y`, "KUBE-SEP-Y", true, false, 0, true},
		{xtblob.IPv6, `-j ACCEPT`, "", false, false, xtblob.VerdictAccept, true},
		{xtblob.IPv6, `-j DROP`, "", false, false, xtblob.VerdictDrop, true},
		{xtblob.IPv4, `-j RETURN`, "", false, false, xtblob.VerdictReturn, true},
		{xtblob.IPv4, `-m comment --comment "counting"`, "", false, true, 0, true},
		{xtblob.IPv4, `-p tcp -m tcp -j DNAT --to-destination 10.0.0.1:80`, "", false, false, 0, false},
		{xtblob.IPv6, `-j MARK --or-mark 0x4000`, "", false, false, 0, false},
	} {
		enc := xtblob.NewEncoder(tc.fam)
		prefix := []byte("prefix")
		text := []byte(tc.rule)
		buf, ref, err := enc.AppendRule(prefix, text)
		if err != nil {
			t.Errorf("%s: %v", tc.rule, err)
			continue
		}
		if !bytes.HasPrefix(buf, []byte("prefix")) {
			t.Errorf("%s: dst's bytes changed", tc.rule)
		}
		if string(ref.Jump) != tc.jump || ref.Goto != tc.isGoto || ref.Fallthrough != tc.fallsThrough {
			t.Errorf("%s: ref %+v (jump %q), want jump %q goto %v fallthrough %v", tc.rule, ref, ref.Jump, tc.jump, tc.isGoto, tc.fallsThrough)
		}
		if tc.jump != "" {
			// Jump aliases the rule text.
			i := bytes.Index(text, []byte(tc.jump))
			if &ref.Jump[0] != &text[i] {
				t.Errorf("%s: Jump does not alias the rule", tc.rule)
			}
		}
		if !tc.standard {
			if ref.VerdictAt != -1 {
				t.Errorf("%s: VerdictAt %d, want -1", tc.rule, ref.VerdictAt)
			}
			continue
		}
		if ref.VerdictAt < len(prefix) || ref.VerdictAt+4 > len(buf) {
			t.Fatalf("%s: VerdictAt %d outside the entry", tc.rule, ref.VerdictAt)
		}
		if v := int32(binary.NativeEndian.Uint32(buf[ref.VerdictAt:])); v != tc.verdict {
			t.Errorf("%s: verdict %d, want %d", tc.rule, v, tc.verdict)
		}
		// The standard target is the entry's last 40 bytes; its verdict
		// follows the 32-byte header.
		if ref.VerdictAt != len(buf)-8 {
			t.Errorf("%s: VerdictAt %d, want %d", tc.rule, ref.VerdictAt, len(buf)-8)
		}
	}
}

func TestAppendRuleSizes(t *testing.T) {
	enc := xtblob.NewEncoder(xtblob.IPv4)
	buf, _, err := enc.AppendRule(nil, []byte(`-j ACCEPT`))
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	if len(buf) != 152 || ne.Uint16(buf[88:]) != 112 || ne.Uint16(buf[90:]) != 152 {
		t.Errorf("IPv4 -j ACCEPT: %d bytes, target_offset %d, next_offset %d; want 152, 112, 152",
			len(buf), ne.Uint16(buf[88:]), ne.Uint16(buf[90:]))
	}
	enc6 := xtblob.NewEncoder(xtblob.IPv6)
	buf, _, err = enc6.AppendRule(buf[:0], []byte(`-m comment --comment x -j ACCEPT`))
	if err != nil {
		t.Fatal(err)
	}
	if len(buf) != 168+288+40 || ne.Uint16(buf[140:]) != 168+288 || ne.Uint16(buf[142:]) != 168+288+40 {
		t.Errorf("IPv6 comment rule: %d bytes, target_offset %d, next_offset %d", len(buf), ne.Uint16(buf[140:]), ne.Uint16(buf[142:]))
	}
}

func TestAppendRuleErrors(t *testing.T) {
	unsupported := []struct {
		fam  xtblob.Family
		rule string
	}{
		{xtblob.IPv4, `-m multiport --dports 80,443 -j ACCEPT`},
		{xtblob.IPv4, `-m owner --uid-owner 0 -j ACCEPT`},
		{xtblob.IPv4, `-j LOG --log-prefix x`},
		{xtblob.IPv4, `-j SNAT --to-source 1.2.3.4`},
		{xtblob.IPv4, `-j CT --notrack`},
		{xtblob.IPv4, `-p icmp -j ACCEPT`},
		{xtblob.IPv4, `-s example.com -j ACCEPT`},
		{xtblob.IPv4, `-s 10.0.0.0/255.0.0.0 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport http -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --syn -j ACCEPT`},
		{xtblob.IPv4, `-m statistic --mode nth --every 2 -j ACCEPT`},
		{xtblob.IPv4, `-m set --match-set S dst -j ACCEPT`}, // no SetIndex
		{xtblob.IPv4, `-m comment --comment "a \"quote\"" -j ACCEPT`},
		{xtblob.IPv4, `-m comment --comment a"b" -j ACCEPT`},
		{xtblob.IPv4, `-j PREROUTING`},
		{xtblob.IPv4, `-g ACCEPT`},
		{xtblob.IPv4, `-j ACCEPT -m mark --mark 1`},
		{xtblob.IPv4, `-p tcp -j DNAT --to-destination 10.0.0.1-10.0.0.2`},
		{xtblob.IPv4, `-j REJECT --reject-with icmp6-no-route`},
		{xtblob.IPv4, `-4 -j ACCEPT`},
		{xtblob.IPv6, `-s 10.0.0.1 -j ACCEPT`},
		{xtblob.IPv6, `-j REJECT --reject-with icmp-port-unreachable`},
		{xtblob.IPv6, `-p tcp -j REJECT --reject-with tcp-rst`},
		{xtblob.IPv4, `-m mark --mark 1 --dport 80 -j ACCEPT`}, // no -p: an unknown option
		// iptables' lax number and address parsing: the tool decides.
		{xtblob.IPv4, `-s 10.0.0.300 -j ACCEPT`},
		{xtblob.IPv4, `-s 10.1 -j ACCEPT`},
		{xtblob.IPv4, `-s 010.0.0.1 -j ACCEPT`},
		{xtblob.IPv4, `-s 1.2.3.4/08 -j ACCEPT`},
		{xtblob.IPv6, `-s fd00::/064 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport +5 -j ACCEPT`},
		{xtblob.IPv4, `-m mark --mark +3 -j ACCEPT`},
	}
	malformed := []struct {
		fam  xtblob.Family
		rule string
	}{
		{xtblob.IPv4, `-s 10.0.0.1/33 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport 08 -j ACCEPT`},
		{xtblob.IPv4, `-m recent --set --seconds 10 -j ACCEPT`},
		{xtblob.IPv4, `-s 10.0.0.1 -s 10.0.0.2 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport 65536 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport 90:80 -j ACCEPT`},
		{xtblob.IPv4, `-p tcp -m tcp --dport 80 --dport 81 -j ACCEPT`},
		{xtblob.IPv4, `-m tcp --dport 80 -j ACCEPT`}, // no -p tcp: the kernel refuses it
		{xtblob.IPv4, `-p udp -m tcp --dport 80 -j ACCEPT`},
		{xtblob.IPv4, `-m comment --comment "unterminated -j ACCEPT`},
		{xtblob.IPv4, `-m comment -j ACCEPT`},
		{xtblob.IPv4, `-m comment --comment`},
		{xtblob.IPv4, `-m conntrack --ctstate NEWISH -j ACCEPT`},
		{xtblob.IPv4, `-m mark --mark 99999999999 -j ACCEPT`},
		{xtblob.IPv4, `-m statistic --mode random --probability 1.5 -j ACCEPT`},
		{xtblob.IPv4, `-m statistic --mode random -j ACCEPT`},
		{xtblob.IPv4, `-m recent --name x -j ACCEPT`},
		{xtblob.IPv4, `-m recent --set --rcheck -j ACCEPT`},
		{xtblob.IPv4, `-j MARK`},
		{xtblob.IPv4, `-j MARK --set-xmark 1 --or-mark 2`},
		{xtblob.IPv4, `-j DNAT`},
		{xtblob.IPv4, `-j DNAT --to-destination 10.0.0.1:80`}, // a port needs -p
		{xtblob.IPv4, `-j ACCEPT -j RETURN`},
		{xtblob.IPv4, `-j DROP`}, // in nat
		{xtblob.IPv6, `-m addrtype --dst-type BROADCAST -j ACCEPT`},
		{xtblob.IPv4, `! -j ACCEPT`},
		{xtblob.IPv4, `-j ACCEPT !`},
		{xtblob.IPv4, `! ! -s 1.2.3.4 -j ACCEPT`},
		{xtblob.IPv4, `-m comment ! --comment x -j ACCEPT`},
		{xtblob.IPv4, `-i averyveryverylongname -j ACCEPT`},
		{xtblob.IPv4, `-j KUBE-SVC-THIS-NAME-IS-FAR-TOO-LONG-FOR-IPTABLES`},
		{xtblob.IPv4, `ACCEPT`},
		{xtblob.IPv4, `-j`},
		{xtblob.IPv6, `-d fd00::1::2 -j ACCEPT`},
		{xtblob.IPv6, `-p tcp -j DNAT --to-destination [fd00::1:80`},
	}
	check := func(fam xtblob.Family, rule string, wantUnsupported bool) {
		t.Helper()
		enc := xtblob.NewEncoder(fam)
		enc.Table = "nat"
		dst := []byte("keep")
		got, ref, err := enc.AppendRule(dst, []byte(rule))
		if err == nil {
			t.Errorf("%q: no error", rule)
			return
		}
		if errors.Is(err, xtblob.ErrUnsupported) != wantUnsupported {
			t.Errorf("%q: error %v; want ErrUnsupported: %v", rule, err, wantUnsupported)
		}
		if string(got) != "keep" || ref.Jump != nil || ref.VerdictAt != -1 {
			t.Errorf("%q: dst %q and ref %+v after an error, want them unchanged", rule, got, ref)
		}
	}
	for _, tc := range unsupported {
		check(tc.fam, tc.rule, true)
	}
	for _, tc := range malformed {
		check(tc.fam, tc.rule, false)
	}
}

// TestSetMatch: -m set takes the set's index from Encoder.SetIndex.
func TestSetMatch(t *testing.T) {
	enc := xtblob.NewEncoder(xtblob.IPv4)
	enc.SetIndex = func(name []byte) (uint16, bool) { return 7, string(name) == "KUBE-CLUSTER-IP" }
	buf, _, err := enc.AppendRule(nil, []byte(`! -m set --match-set KUBE-CLUSTER-IP src,dst -j ACCEPT`))
	if err == nil {
		t.Errorf("\"!\" before -m: no error")
	}
	buf, _, err = enc.AppendRule(nil, []byte(`-m set ! --match-set KUBE-CLUSTER-IP src,dst -j ACCEPT`))
	if err != nil {
		t.Fatal(err)
	}
	d := 112 + 32
	if idx := binary.NativeEndian.Uint16(buf[d:]); idx != 7 || buf[d+2] != 2 || buf[d+3] != 1|1<<1 {
		t.Errorf("set info: index %d dim %d flags %#x, want 7, 2, 0x3", idx, buf[d+2], buf[d+3])
	}
	if _, _, err := enc.AppendRule(nil, []byte(`-m set --match-set OTHER dst -j ACCEPT`)); !errors.Is(err, xtblob.ErrUnsupported) {
		t.Errorf("unknown set: %v, want ErrUnsupported", err)
	}
}

// TestAppendRuleNoAllocs: encoding allocates nothing once dst has room.
func TestAppendRuleNoAllocs(t *testing.T) {
	enc := xtblob.NewEncoder(xtblob.IPv4)
	rule := []byte(`-m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-SXIVWICOYRO3J4NJ`)
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if _, _, err = enc.AppendRule(buf[:0], rule); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per rule, want 0", allocs)
	}
}

// BenchmarkAppendRule encodes the whole corpus (the engines' rules over
// the conformance scenarios, the golden files and the vocabulary file)
// into one growing buffer; ns/op is per rule.
func BenchmarkAppendRule(b *testing.B) {
	corpus := captureCorpus(b)
	encs := map[xtblob.Family]*xtblob.Encoder{xtblob.IPv4: xtblob.NewEncoder(xtblob.IPv4), xtblob.IPv6: xtblob.NewEncoder(xtblob.IPv6)}
	for _, e := range encs {
		e.SetIndex = fakeSetIndex
	}
	type item struct {
		enc  *xtblob.Encoder
		rule []byte
	}
	items := make([]item, len(corpus))
	total := 0
	for i, r := range corpus {
		items[i] = item{encs[r.Family], []byte(r.Rule)}
		buf, _, _ := items[i].enc.AppendRule(nil, items[i].rule)
		total += len(buf)
	}
	buf := make([]byte, 0, total)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		it := items[n]
		n++
		if n == len(items) {
			n = 0
			buf = buf[:0]
		}
		var err error
		if buf, _, err = it.enc.AppendRule(buf, it.rule); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/float64(len(items)), "bytes/rule")
}

// BenchmarkEncodeColdStart encodes every rule of the iptables engine's
// cold-start payload for proxytest.NewBenchCluster(10000) (issue #14's
// workload: the rules iptables-legacy-restore would otherwise parse), one
// op being the whole payload.
func BenchmarkEncodeColdStart(b *testing.B) {
	const services = 10000
	fakes := iptablestest.NewFakes(v1.IPv4Protocol)
	var payload []byte
	fakes.IPTables.SetRestoreHook(func(data []byte) error {
		payload = append(payload, data...)
		return nil
	})
	p, err := iptables.NewProxier(iptables.Config{
		Common: engine.Common{NodeName: proxytest.BenchNode, NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Netfilter: engine.Netfilter{
			LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.128.0.0/14")},
		},
	}, fakes.Interfaces())
	if err != nil {
		b.Fatal(err)
	}
	c := proxytest.NewBenchCluster(services)
	f := proxytest.NewFeeder(p)
	if err := f.Apply(proxytest.Objects{Services: c.Services, EndpointSlices: c.Slices}); err != nil {
		b.Fatal(err)
	}
	f.Synced()
	if err := p.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	var rules [][]byte
	for line := range bytes.Lines(payload) {
		if bytes.HasPrefix(line, []byte("-A ")) {
			_, rule, _ := bytes.Cut(line[3:len(line)-1], []byte(" "))
			rules = append(rules, rule)
		}
	}
	enc := xtblob.NewEncoder(xtblob.IPv4)
	var buf []byte
	for _, r := range rules {
		if buf, _, err = enc.AppendRule(buf, r); err != nil {
			b.Fatalf("%s: %v", r, err)
		}
	}
	size := len(buf)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		buf = buf[:0]
		for _, r := range rules {
			buf, _, _ = enc.AppendRule(buf, r)
		}
	}
	b.ReportMetric(float64(len(rules)), "rules")
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(rules)), "ns/rule")
}
