package xtblob_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/xtblob"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// corpusRule is one rule line the engines write: "-A Chain Rule" in
// Table of Family; Source says where it was found.
type corpusRule struct {
	Family xtblob.Family
	Table  string
	Chain  string
	Rule   string
	Source string
}

func (r corpusRule) String() string {
	return fmt.Sprintf("%s %s (%s): -A %s %s", famName(r.Family), r.Table, r.Source, r.Chain, r.Rule)
}

// corpusSet collects distinct rules.
type corpusSet struct {
	seen  map[string]bool
	rules []corpusRule
}

// addPayload adds the rule lines of an iptables-restore input.
func (c *corpusSet) addPayload(fam xtblob.Family, source string, payload []byte) error {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	sc := bufio.NewScanner(strings.NewReader(string(payload)))
	sc.Buffer(nil, 1<<20)
	table := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, "-I "), strings.HasPrefix(line, "-D "):
			// -D's rule is encoded too (libiptc finds the entry to
			// delete by its bytes), and -I's, after an optional
			// position.
			chain, rule, ok := strings.Cut(line[3:], " ")
			if !ok {
				return fmt.Errorf("%s: rule line without a rule: %q", source, line)
			}
			if line[1] == 'I' {
				if n, rest, ok := strings.Cut(rule, " "); ok && strings.Trim(n, "0123456789") == "" {
					rule = rest
				}
			}
			key := fmt.Sprint(fam, table, chain, rule)
			if c.seen[key] {
				continue
			}
			c.seen[key] = true
			c.rules = append(c.rules, corpusRule{Family: fam, Table: table, Chain: chain, Rule: rule, Source: source})
		}
	}
	return sc.Err()
}

// goldenCorpus adds the rules of the iptables engine's golden files.
func goldenCorpus(t testing.TB, c *corpusSet) {
	files, err := filepath.Glob(filepath.Join("..", "..", "iptables", "testdata", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fam := xtblob.IPv4
		if strings.Contains(filepath.Base(f), "ipv6") {
			fam = xtblob.IPv6
		}
		if err := c.addPayload(fam, filepath.Base(f), data); err != nil {
			t.Fatal(err)
		}
	}
}

// engineVariant builds one engine configuration over fresh fakes whose
// iptables-restore inputs go to record.
type engineVariant struct {
	name string
	new  func(t testing.TB, topo proxytest.Topology, opts proxytest.Options, record func([]byte) error) (proxy.Provider, func())
}

func iptablesVariant(name string, tweak func(*iptables.Config, proxytest.Topology)) engineVariant {
	return engineVariant{name: "iptables/" + name, new: func(t testing.TB, topo proxytest.Topology, opts proxytest.Options, record func([]byte) error) (proxy.Provider, func()) {
		fakes := iptablestest.NewFakes(topo.Family)
		fakes.IPTables.SetRestoreHook(record)
		cfg := iptables.Config{
			Common: engine.Common{NodeName: topo.NodeName, NodeIPs: []netip.Addr{topo.NodeIP}},
			Netfilter: engine.Netfilter{
				MasqueradeAll:     opts.MasqueradeAll,
				LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
				NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
			},
			LocalAddresses: func() ([]netip.Addr, error) {
				return []netip.Addr{topo.NodeIP, topo.PodGateway}, nil
			},
		}
		if tweak != nil {
			tweak(&cfg, topo)
		}
		p, err := iptables.NewProxier(cfg, fakes.Interfaces())
		if err != nil {
			t.Fatal(err)
		}
		return p, func() {}
	}}
}

func ipvsVariant(name string, tweak func(*ipvs.Config, proxytest.Topology)) engineVariant {
	return engineVariant{name: "ipvs/" + name, new: func(t testing.TB, topo proxytest.Topology, opts proxytest.Options, record func([]byte) error) (proxy.Provider, func()) {
		fakes := ipvstest.NewFakes(topo.Family)
		fakes.IPTables.SetRestoreHook(record)
		fakes.Netlink.AddLink(topo.UplinkInterface, topo.NodeIP)
		if topo.PodGateway.IsValid() {
			fakes.Netlink.AddLink("cbr0", topo.PodGateway)
		}
		cfg := ipvs.Config{
			Common: engine.Common{IPFamily: topo.Family, NodeName: topo.NodeName},
			Netfilter: engine.Netfilter{
				MasqueradeAll: opts.MasqueradeAll,
				LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
			},
		}
		if tweak != nil {
			tweak(&cfg, topo)
		}
		p, err := ipvs.NewProxier(cfg, fakes.Interfaces())
		if err != nil {
			t.Fatal(err)
		}
		return p, func() {}
	}}
}

func userspaceVariant() engineVariant {
	return engineVariant{name: "userspace", new: func(t testing.TB, topo proxytest.Topology, opts proxytest.Options, record func([]byte) error) (proxy.Provider, func()) {
		fakes := userspacetest.NewFakes(topo.Family)
		fakes.IPTables.SetRestoreHook(record)
		p, err := userspace.NewProxier(userspace.Config{
			Common:       engine.Common{NodeName: topo.NodeName, IPFamily: topo.Family, NodeIPs: []netip.Addr{topo.NodeIP}},
			HostIP:       topo.NodeIP,
			ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR},
		}, fakes.Interfaces())
		if err != nil {
			t.Fatal(err)
		}
		return p, func() { p.Close() }
	}}
}

// engineVariants are the engine configurations the corpus runs the
// conformance scenarios through: the conformance configuration and the
// settings that add vocabulary (local detection by interface, masquerade
// all, localhost node ports, node ports on every
// address, another masquerade bit).
func engineVariants() []engineVariant {
	return []engineVariant{
		iptablesVariant("conformance", nil),
		iptablesVariant("bridge", func(c *iptables.Config, _ proxytest.Topology) {
			c.LocalDetector = proxy.LocalDetector{Mode: proxy.LocalModeBridgeInterface, Interface: "cbr0"}
		}),
		iptablesVariant("masquerade-all,prefix,all-nodeports", func(c *iptables.Config, _ proxytest.Topology) {
			c.MasqueradeAll = true
			c.LocalDetector = proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"}
			c.NodePortAddresses = nil
			c.MasqueradeBit = 3
		}),
		iptablesVariant("localhost-nodeports", func(c *iptables.Config, _ proxytest.Topology) {
			c.LocalhostNodePorts = true
			c.NodePortAddresses = nil
			c.LocalDetector = proxy.LocalDetector{}
		}),
		ipvsVariant("conformance", nil),
		ipvsVariant("masquerade-all,prefix", func(c *ipvs.Config, _ proxytest.Topology) {
			c.MasqueradeAll = true
			c.LocalDetector = proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"}
		}),
		userspaceVariant(),
	}
}

var (
	corpusOnce  sync.Once
	corpusRules []corpusRule
	corpusErr   error
)

// captureCorpus is every rule line of the golden files and of the
// payloads the engines restore over the conformance scenarios (both
// families, every engine variant), computed once per test binary.
func captureCorpus(t testing.TB) []corpusRule {
	t.Helper()
	corpusOnce.Do(func() {
		var c corpusSet
		goldenCorpus(t, &c)
		if err := vocabularyCorpus(&c); err != nil {
			corpusErr = err
			return
		}
		for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			topo := proxytest.DefaultTopology(fam)
			xfam := xtblob.IPv4
			if fam == v1.IPv6Protocol {
				xfam = xtblob.IPv6
			}
			for _, v := range engineVariants() {
				for _, sc := range proxytest.Scenarios(topo) {
					if err := runScenario(t, topo, xfam, v, sc, &c); err != nil {
						corpusErr = fmt.Errorf("%s %s %s: %w", fam, v.name, sc.Name, err)
						return
					}
				}
			}
		}
		corpusRules = c.rules
	})
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return corpusRules
}

func runScenario(t testing.TB, topo proxytest.Topology, fam xtblob.Family, v engineVariant, sc proxytest.Scenario, c *corpusSet) error {
	var mu sync.Mutex
	var payloads [][]byte
	record := func(data []byte) error {
		mu.Lock()
		payloads = append(payloads, append([]byte(nil), data...))
		mu.Unlock()
		return nil
	}
	p, done := v.new(t, topo, sc.Options, record)
	defer done()
	f := proxytest.NewFeeder(p)
	for i, st := range sc.Steps {
		if err := f.Apply(st.Objects); err != nil {
			return err
		}
		if i == 0 {
			f.Synced()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := p.Sync(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("step %s: %w", st.Name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pl := range payloads {
		if err := c.addPayload(fam, v.name+"/"+sc.Name, pl); err != nil {
			return err
		}
	}
	return nil
}

// TestCorpusEncodes requires every rule line the engines write to
// encode: a renderer change that adds vocabulary fails here, rather than
// making the in-process writer fall back to iptables-restore in silence.
func TestCorpusEncodes(t *testing.T) {
	corpus := captureCorpus(t)
	encs := map[xtblob.Family]*xtblob.Encoder{xtblob.IPv4: xtblob.NewEncoder(xtblob.IPv4), xtblob.IPv6: xtblob.NewEncoder(xtblob.IPv6)}
	for _, e := range encs {
		e.SetIndex = fakeSetIndex
	}
	count := map[xtblob.Family]int{}
	for _, r := range corpus {
		if _, _, err := encs[r.Family].AppendRule(nil, []byte(r.Rule)); err != nil {
			t.Errorf("%s: %v", r, err)
		}
		count[r.Family]++
	}
	t.Logf("%d IPv4 and %d IPv6 distinct rules encode", count[xtblob.IPv4], count[xtblob.IPv6])
	if count[xtblob.IPv4] < 500 || count[xtblob.IPv6] < 300 {
		t.Errorf("the corpus is smaller than expected: %v", count)
	}
}

// vocabularyCorpus adds testdata/encode/vocabulary.txt: lines
// "<4|6> <table> <chain> <rule>" for the vocabulary the engines do not
// write today.
func vocabularyCorpus(c *corpusSet) error {
	data, err := os.ReadFile(filepath.Join("testdata", "encode", "vocabulary.txt"))
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[0] != "4" && f[0] != "6" {
			return fmt.Errorf("vocabulary.txt:%d: bad line %q", i+1, line)
		}
		fam := xtblob.IPv4
		if f[0] == "6" {
			fam = xtblob.IPv6
		}
		payload := fmt.Sprintf("*%s\n-A %s %s\nCOMMIT\n", f[1], f[2], f[3])
		if err := c.addPayload(fam, fmt.Sprintf("vocabulary.txt:%d", i+1), []byte(payload)); err != nil {
			return err
		}
	}
	return nil
}

// fakeSetIndex answers index 0 for every set, for the tests that encode
// without a kernel.
var fakeSetIndex = func(name []byte) (uint16, bool) { return 0, true }

func famName(fam xtblob.Family) string {
	if fam == xtblob.IPv6 {
		return "IPv6"
	}
	return "IPv4"
}
