//go:build linux

package nftables_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// upstreamVariant is one configuration under which the golden objects'
// table is compared with upstream kube-proxy's (testdata/upstream).
type upstreamVariant struct {
	name     string
	family   v1.IPFamily
	opts     proxytest.Options
	matchAll bool // node ports on every local address (nodePortAddresses 0.0.0.0/0 or ::/0)
}

var upstreamVariants = []upstreamVariant{
	{name: "ipv4", family: v1.IPv4Protocol},
	{name: "ipv4-masquerade-all", family: v1.IPv4Protocol, opts: proxytest.Options{MasqueradeAll: true}},
	{name: "ipv4-all-addresses", family: v1.IPv4Protocol, matchAll: true},
	{name: "ipv6", family: v1.IPv6Protocol},
}

func (v upstreamVariant) config(topo proxytest.Topology) nftables.Config {
	cfg := conformanceConfig(topo, v.opts)
	if v.matchAll {
		bits := 32
		if v.family == v1.IPv6Protocol {
			bits = 128
		}
		cfg.NodePortAddresses = []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
		if bits == 32 {
			cfg.NodePortAddresses = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
		}
	}
	return cfg
}

// ourTable is the table this engine writes for the golden objects under v,
// as knftables.Fake dumps it.
func (v upstreamVariant) ourTable(t *testing.T) string {
	t.Helper()
	topo := proxytest.DefaultTopology(v.family)
	svcs, slices := goldenObjects(topo)
	fakes := nftablestest.NewFakes(v.family)
	p := newTestProxier(t, fakes, v.config(topo))
	for _, s := range svcs {
		p.OnServiceAdd(s)
	}
	for _, s := range slices {
		p.OnEndpointSliceAdd(s)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	return fakes.Dump()
}

// TestTableMatchesUpstream compares, line by line, the table this engine
// writes for the golden objects with the one upstream kube-proxy v1.37.2's
// nftables proxier writes for the same objects and configuration
// (testdata/upstream/*.nft; testdata/upstream/README.md says how they were
// made). The differences allowed are this engine's own, documented in
// doc.go: the content-hash comments, per-endpoint rules instead of one
// inline map or vmap (normalized back here), and the nodeport-ips set kept
// (empty) when node ports match every address.
func TestTableMatchesUpstream(t *testing.T) {
	if dir := os.Getenv("SVCPROXY_EXPORT_UPSTREAM_OBJECTS"); dir != "" {
		exportUpstreamObjects(t, dir)
	}
	for _, v := range upstreamVariants {
		t.Run(v.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "upstream", v.name+".nft"))
			if err != nil {
				t.Fatal(err)
			}
			ours := normalizeToUpstream(v.ourTable(t))
			theirs := upstreamSortedLines(string(want))
			if v.matchAll {
				theirs = append(theirs, fmt.Sprintf("add set %s kube-proxy nodeport-ips { type %s ; comment \"IPs that accept NodePort traffic\" ; }",
					ipFamilyWord(v.family), addrType(v.family)))
				sort.Strings(theirs)
			}
			if d := lineDiff(theirs, ours); d != "" {
				t.Errorf("table differs from upstream v1.37.2's (- upstream, + ours):\n%s", d)
			}
		})
	}
}

func ipFamilyWord(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return "ip6"
	}
	return "ip"
}

func addrType(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

var (
	hashComment  = regexp.MustCompile(` comment "svcproxy:[0-9a-z]+"| svcproxy:[0-9a-z]+`)
	ruleLine     = regexp.MustCompile(`^add rule (ip6?) kube-proxy (\S+) (.*)$`)
	dispatchStep = regexp.MustCompile(`^numgen random mod \d+ 0 goto (endpoint-\S+)$`)
	dispatchLast = regexp.MustCompile(`^goto (endpoint-\S+)$`)
	dnatStep     = regexp.MustCompile(`^numgen random mod \d+ 0 meta l4proto (\S+) dnat to (\S+)$`)
	dnatLast     = regexp.MustCompile(`^meta l4proto (\S+) dnat to (\S+)$`)
	slotComment  = regexp.MustCompile(` comment "svcproxy-slot:\d+/\d+"`)
	dnatMap      = regexp.MustCompile(`^meta l4proto (\S+) dnat (ip6?) to numgen random mod (\d+) offset (\d+) map @(\S+)$`)
	endpointMap  = regexp.MustCompile(`^add (map|element) ip6? kube-proxy service-endpoints-\S+ `)
	endpointElem = regexp.MustCompile(`^add element ip6? kube-proxy (\S+) \{ (\d+) : (.*) \}$`)
)

// normalizeToUpstream turns a dump of this engine's table into upstream's
// shape: hash comments dropped, and each run of per-endpoint rules in a
// service or local chain folded into upstream v1.37's one rule: dispatch
// to endpoint chains (affinity) into "numgen random mod N vmap { 0 : goto
// …, … }", DNATs to several endpoints into "meta l4proto P dnat ip addr .
// port to numgen random mod N map { 0 : A . p, … }" (one endpoint stays a
// plain "dnat to", as upstream writes it). Lines come back sorted.
func normalizeToUpstream(dump string) []string {
	dump = hashComment.ReplaceAllString(dump, "")
	dump = slotComment.ReplaceAllString(dump, "")
	// The endpoint maps (this engine's, endpoint_maps.go): their elements
	// folded back into the rules that look them up, as upstream's inline
	// maps; the maps themselves dropped.
	held := map[string]string{} // "map key" → "A . p"
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(dump), "\n") {
		if e := endpointElem.FindStringSubmatch(l); e != nil {
			held[e[1]+" "+e[2]] = e[3]
		}
		if !endpointMap.MatchString(l) {
			lines = append(lines, l)
		}
	}
	for i, l := range lines {
		m := ruleLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		d := dnatMap.FindStringSubmatch(m[3])
		if d == nil {
			continue
		}
		n, _ := strconv.Atoi(d[3])
		k, _ := strconv.Atoi(d[4])
		var parts []string
		for j := range n {
			parts = append(parts, fmt.Sprintf("%d : %s", j, held[fmt.Sprintf("%s %d", d[5], k+j)]))
		}
		lines[i] = fmt.Sprintf("add rule %s kube-proxy %s meta l4proto %s dnat %s addr . port to numgen random mod %d map { %s }",
			m[1], m[2], d[1], d[2], n, strings.Join(parts, " , "))
	}
	dump = strings.Join(lines, "\n")
	var out []string
	var run []string // vmap: endpoint chains; dnat: "addr . port"
	var runPrefix, runKind, runProto, runFamily string
	flush := func() {
		if len(run) == 0 {
			return
		}
		var parts []string
		for i, c := range run {
			if runKind == "vmap" {
				parts = append(parts, fmt.Sprintf("%d : goto %s", i, c))
			} else {
				parts = append(parts, fmt.Sprintf("%d : %s", i, c))
			}
		}
		if runKind == "vmap" {
			out = append(out, fmt.Sprintf("%snumgen random mod %d vmap { %s }", runPrefix, len(run), strings.Join(parts, " , ")))
		} else {
			out = append(out, fmt.Sprintf("%smeta l4proto %s dnat %s addr . port to numgen random mod %d map { %s }",
				runPrefix, runProto, runFamily, len(run), strings.Join(parts, " , ")))
		}
		run = nil
	}
	add := func(prefix, kind, item string, last bool) {
		if prefix != runPrefix || kind != runKind {
			flush()
		}
		runPrefix, runKind = prefix, kind
		run = append(run, item)
		if last {
			flush()
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(dump), "\n") {
		m := ruleLine.FindStringSubmatch(l)
		if m == nil || !(strings.HasPrefix(m[2], "service-") || strings.HasPrefix(m[2], "local-")) {
			flush()
			out = append(out, l)
			continue
		}
		prefix := "add rule " + m[1] + " kube-proxy " + m[2] + " "
		if s := dispatchStep.FindStringSubmatch(m[3]); s != nil {
			add(prefix, "vmap", s[1], false)
			continue
		}
		if s := dispatchLast.FindStringSubmatch(m[3]); s != nil {
			add(prefix, "vmap", s[1], true)
			continue
		}
		if s := dnatStep.FindStringSubmatch(m[3]); s != nil {
			runProto, runFamily = s[1], m[1]
			add(prefix, "dnat", mapTarget(s[2]), false)
			continue
		}
		if s := dnatLast.FindStringSubmatch(m[3]); s != nil && runKind == "dnat" && runPrefix == prefix && len(run) > 0 {
			add(prefix, "dnat", mapTarget(s[2]), true)
			continue
		}
		flush()
		out = append(out, l)
	}
	flush()
	sort.Strings(out)
	return out
}

// mapTarget writes "A:p" or "[A6]:p" as an element value of upstream's
// dnat map, "A . p".
func mapTarget(ap string) string {
	a := netip.MustParseAddrPort(ap)
	return fmt.Sprintf("%s . %d", a.Addr(), a.Port())
}

func upstreamSortedLines(s string) []string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return l
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got []string) string {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var b strings.Builder
	for _, l := range want {
		if count[l] > 0 {
			fmt.Fprintf(&b, "- %s\n", l)
			count[l]--
		}
	}
	for _, l := range got {
		if count[l] < 0 {
			fmt.Fprintf(&b, "+ %s\n", l)
			count[l]++
		}
	}
	return b.String()
}

// exportUpstreamObjects writes, per variant, the golden objects and the
// configuration as YAML for the generator described in
// testdata/upstream/README.md.
func exportUpstreamObjects(t *testing.T, dir string) {
	for _, v := range upstreamVariants {
		topo := proxytest.DefaultTopology(v.family)
		svcs, slices := goldenObjects(topo)
		var items []any
		for _, s := range svcs {
			s = s.DeepCopy()
			s.APIVersion, s.Kind = "v1", "Service"
			items = append(items, s)
		}
		for _, s := range slices {
			s = s.DeepCopy()
			s.APIVersion, s.Kind = "discovery.k8s.io/v1", "EndpointSlice"
			items = append(items, s)
		}
		cfg := v.config(topo)
		var npa []string
		for _, p := range cfg.NodePortAddresses {
			npa = append(npa, p.String())
		}
		b, err := yaml.Marshal(map[string]any{
			"items":             items,
			"nodeName":          topo.NodeName,
			"nodeIP":            topo.NodeIP.String(),
			"clusterCIDR":       topo.ClusterCIDR.String(),
			"masqueradeAll":     v.opts.MasqueradeAll,
			"nodePortAddresses": npa,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v.name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
