//go:build linux

package iptables_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/nfgen"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

var (
	xtwalkSeed      = flag.Uint64("xtwalk.seed", 0, "replay TestInProcessWalkMatchesTool with this seed only (both families)")
	xtwalkStepsFlag = flag.Int("xtwalk.steps", 0, "steps of each TestInProcessWalkMatchesTool walk (0: 20, 40 with -xtwalk.seed)")
)

// xtwalkSeeds and xtwalkSteps bound the differential walk: per family,
// len(xtwalkSeeds)*xtwalkSteps syncs on each side.
// The seeds cover what xtwalkConfig varies (1: localhost node ports; 3:
// that and masquerade all; 34: node port addresses), and 34's walks have a
// sync that fails on both sides (a hand edit not followed by a full sync
// makes a partial sync's -D miss: the in-process write is refused, the
// tool refuses it too, and the next sync is full).
var xtwalkSeeds = []uint64{1, 3, 34}

const xtwalkSteps = 20

// TestInProcessWalkMatchesTool drives two Proxiers over the legacy backend
// with the same random sequence of changes, each in a network namespace of
// its own: one whose Runner restores from the process (internal/xtblob),
// one whose Runner always execs iptables-legacy-restore. The sequence
// covers what the engine writes in practice: partial syncs (service and
// endpoint chains redeclared, rules deleted and inserted in the shared
// dispatch chains, stale chains removed), full syncs (requested, after a
// node label change, after a hand edit of our chains that a full resync
// repairs chain by chain), node ports, load balancers with source ranges,
// external IPs, session affinity, Local traffic policies, services and
// slices coming and going. After every sync both must have succeeded or
// both failed, and the kernel's tables must be the same: the listing of
// iptables-legacy-save and a counter-free hash of each table's blob. The
// in-process Runner must never have handed an input to the tool.
//
// -xtwalk.seed=N replays seed N alone (with twice the steps);
// -xtwalk.steps=N sets the length of the walks.
func TestInProcessWalkMatchesTool(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, tool := range []string{"iptables-legacy-restore", "ip6tables-legacy-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs iptables-legacy: %v", err)
		}
	}
	seeds, steps := xtwalkSeeds, xtwalkSteps
	if *xtwalkSeed != 0 {
		seeds, steps = []uint64{*xtwalkSeed}, 2*xtwalkSteps
	}
	if *xtwalkStepsFlag > 0 {
		steps = *xtwalkStepsFlag
	}
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", fam, seed), func(t *testing.T) {
				script := xtwalkScript(rand.New(rand.NewPCG(seed, xtwalkStream[fam])), steps)
				cfg := xtwalkConfig(fam, seed)
				hashSeed := maphash.MakeSeed()
				var ref []xtwalkResult
				netnstest.InFreshNetns(t, func() { ref = xtwalkRun(t, fam, cfg, true, script, nil, hashSeed) })
				if t.Failed() || t.Skipped() {
					return
				}
				netnstest.InFreshNetns(t, func() { xtwalkRun(t, fam, cfg, false, script, ref, hashSeed) })
			})
		}
	}
}

// xtwalkStream makes the families' walks differ under one seed.
var xtwalkStream = map[v1.IPFamily]uint64{v1.IPv4Protocol: 4, v1.IPv6Protocol: 6}

// xtwalkSlots is the number of service slots of the walk.
const xtwalkSlots = 8

// xtEP is one endpoint of a slot's slice.
type xtEP struct {
	ready, serving, terminating, local bool
	zone                               uint8 // hint: 0 none, 1 zone-a, 2 zone-b
}

// xtSlot is one service slot: a service (or none) and its slice (or none).
type xtSlot struct {
	svc      bool
	typ      uint8 // 0 ClusterIP, 1 NodePort, 2 LoadBalancer
	ports    uint8 // 1..4
	protos   [4]uint8
	affinity int32 // seconds; 0: none
	etpLocal bool
	itpLocal bool
	extIPs   uint8 // 0..2
	ranges   uint8 // 0..2 load balancer source ranges
	ingress  uint8 // 0..2 load balancer ingress IPs
	slice    bool
	target   uint8 // target port variant
	eps      uint8 // 0..4
	ep       [4]xtEP
}

type xtState [xtwalkSlots]xtSlot

// xtStep is one step of the script: the state to move to, and what else
// happens before the sync.
type xtStep struct {
	state  xtState
	full   bool   // RequestFullSync
	zone   string // the node's zone label changes to this
	tamper int    // 1..: a hand edit of our chains (then a full sync)
}

func (s xtStep) String() string {
	var b strings.Builder
	if s.full {
		b.WriteString(" full")
	}
	if s.zone != "" {
		b.WriteString(" zone=" + s.zone)
	}
	if s.tamper > 0 {
		fmt.Fprintf(&b, " tamper=%d", s.tamper)
	}
	return b.String()
}

func randomXTSlot(r *rand.Rand) xtSlot {
	s := xtSlot{svc: r.IntN(5) > 0, slice: r.IntN(6) > 0}
	s.typ = uint8(r.IntN(3))
	s.ports = uint8(1 + r.IntN(4))
	for i := range s.protos {
		s.protos[i] = uint8(r.IntN(3))
	}
	if r.IntN(4) == 0 {
		s.affinity = int32(1 + r.IntN(10800))
	}
	s.etpLocal = s.typ > 0 && r.IntN(3) == 0
	s.itpLocal = r.IntN(5) == 0
	s.extIPs = uint8(r.IntN(3)) * uint8(r.IntN(2))
	s.ranges = uint8(r.IntN(3))
	s.ingress = uint8(r.IntN(3))
	s.target = uint8(r.IntN(2))
	s.eps = uint8(r.IntN(5))
	for i := range s.ep {
		s.ep[i] = randomXTEP(r)
	}
	return s
}

func randomXTEP(r *rand.Rand) xtEP {
	e := xtEP{local: r.IntN(2) == 0}
	switch r.IntN(5) {
	case 0, 1, 2: // ready
		e.ready, e.serving = true, true
	case 3: // terminating, still serving
		e.serving, e.terminating = true, true
	case 4: // terminating, not serving
		e.terminating = true
	}
	if r.IntN(4) == 0 {
		e.zone = uint8(1 + r.IntN(2))
	}
	return e
}

// mutate changes one thing of slot s.
func (s *xtSlot) mutate(r *rand.Rand) {
	switch r.IntN(12) {
	case 0:
		s.svc = !s.svc
	case 1:
		s.slice = !s.slice
	case 2:
		s.typ = uint8(r.IntN(3))
		if s.typ == 0 {
			s.etpLocal = false
		}
	case 3:
		s.ports = uint8(1 + r.IntN(4))
	case 4:
		s.protos[r.IntN(4)] = uint8(r.IntN(3))
	case 5:
		if s.affinity == 0 {
			s.affinity = int32(1 + r.IntN(10800))
		} else {
			s.affinity = 0
		}
	case 6:
		s.etpLocal = s.typ > 0 && !s.etpLocal
		s.itpLocal = r.IntN(3) == 0
	case 7:
		s.extIPs = uint8(r.IntN(3))
	case 8:
		s.ranges, s.ingress = uint8(r.IntN(3)), uint8(r.IntN(3))
	case 9:
		s.eps = uint8(r.IntN(5))
	case 10:
		s.ep[r.IntN(4)] = randomXTEP(r)
	case 11:
		*s = randomXTSlot(r)
	}
}

// xtwalkScript is the walk: mostly one or two slots changing (the partial
// syncs of a busy cluster), sometimes everything, a requested full sync, a
// node zone change or a hand edit.
func xtwalkScript(r *rand.Rand, steps int) []xtStep {
	var script []xtStep
	var cur xtState
	zone := "zone-a"
	for n := range steps {
		st := xtStep{}
		next := cur
		k := r.IntN(20)
		if n == 0 {
			k = 13 // start with every slot drawn
		}
		switch {
		case k < 10:
			next[r.IntN(xtwalkSlots)].mutate(r)
		case k < 13:
			for range 2 + r.IntN(3) {
				next[r.IntN(xtwalkSlots)].mutate(r)
			}
		case k < 15:
			for i := range next {
				next[i] = randomXTSlot(r)
			}
		case k < 17:
			st.full = true
			next[r.IntN(xtwalkSlots)].mutate(r)
		case k < 18:
			if zone == "zone-a" {
				zone = "zone-b"
			} else {
				zone = "zone-a"
			}
			st.zone = zone
		default:
			st.tamper = 1 + r.IntN(len(xtwalkTampers))
			st.full = r.IntN(4) > 0
		}
		st.state = next
		script = append(script, st)
		cur = next
	}
	return script
}

// xtwalkTampers are hand edits (iptables-legacy commands), which the next
// full sync repairs where they touched our chains, and leaves where they
// are someone else's (the in-process restore must keep foreign rules,
// foreign extensions among them, and their counters, as the tool does).
// A command may fail (the chain or rule is absent): it must then fail on
// both sides.
var xtwalkTampers = [][][]string{
	{{"-t", "nat", "-F", "KUBE-SERVICES"}},
	{{"-t", "nat", "-D", "KUBE-SERVICES", "1"}},
	{{"-t", "nat", "-F", "KUBE-NODEPORTS"}},
	{{"-t", "filter", "-F", "KUBE-EXTERNAL-SERVICES"}},
	{{"-t", "nat", "-N", "KUBE-SVC-XTWALKSTALE0000"}},
	{{"-t", "nat", "-I", "KUBE-POSTROUTING", "-j", "RETURN"}},
	{{"-t", "filter", "-I", "OUTPUT", "-o", "lo", "-m", "length", "--length", "0:70", "-j", "ACCEPT"}},
	{
		{"-t", "mangle", "-N", "XTWALK-FOREIGN"},
		{"-t", "mangle", "-A", "XTWALK-FOREIGN", "-p", "udp", "-j", "MARK", "--set-xmark", "0x10/0x10"},
		{"-t", "mangle", "-A", "OUTPUT", "-j", "XTWALK-FOREIGN"},
	},
	{
		{"-t", "nat", "-N", "XTWALK-NAT"},
		{"-t", "nat", "-A", "XTWALK-NAT", "-m", "statistic", "--mode", "nth", "--every", "3", "-j", "RETURN"},
		{"-t", "nat", "-I", "OUTPUT", "-j", "XTWALK-NAT"},
	},
	{{"-t", "filter", "-P", "FORWARD", "DROP"}},
}

type xtwalkFamily struct {
	cluster, ep, ext, lb, rng func(i, j int) string
}

var xtwalkAddrs = map[v1.IPFamily]xtwalkFamily{
	v1.IPv4Protocol: {
		cluster: func(i, _ int) string { return fmt.Sprintf("172.30.%d.1", i) },
		ep:      func(i, j int) string { return fmt.Sprintf("10.1.%d.%d", i, j+1) },
		ext:     func(i, j int) string { return fmt.Sprintf("192.168.%d.%d", 100+i, j+1) },
		lb:      func(i, j int) string { return fmt.Sprintf("1.1.%d.%d", i, j+1) },
		rng:     func(i, j int) string { return fmt.Sprintf("203.0.%d.%d/%d", 100+i, 128*j, 25) },
	},
	v1.IPv6Protocol: {
		cluster: func(i, _ int) string { return fmt.Sprintf("fd00:30::%x:1", i) },
		ep:      func(i, j int) string { return fmt.Sprintf("fd00:10:1::%x:%x", i, j+1) },
		ext:     func(i, j int) string { return fmt.Sprintf("fd00:99::%x:%x", i, j+1) },
		lb:      func(i, j int) string { return fmt.Sprintf("2001:db8:1::%x:%x", i, j+1) },
		rng:     func(i, j int) string { return fmt.Sprintf("2001:db8:%x:%x::/64", 100+i, j) },
	},
}

var xtwalkProtos = [3]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}

// objects renders slot i of family fam: its service and slice (nil when
// absent).
func (s xtSlot) objects(fam v1.IPFamily, i int) (*v1.Service, *discovery.EndpointSlice) {
	a := xtwalkAddrs[fam]
	name := fmt.Sprintf("w%d", i)
	var ports []v1.ServicePort
	for j := range int(s.ports) {
		p := v1.ServicePort{Name: fmt.Sprintf("p%d", j), Port: int32(80 + j), Protocol: xtwalkProtos[s.protos[j]]}
		if s.typ > 0 {
			p.NodePort = int32(30000 + 10*i + j)
		}
		ports = append(ports, p)
	}
	var sv *v1.Service
	if s.svc {
		cip := a.cluster(i, 0)
		sv = &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "walk", Name: name},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeClusterIP, ClusterIP: cip, ClusterIPs: []string{cip},
				IPFamilies: []v1.IPFamily{fam}, Ports: ports,
			},
		}
		switch s.typ {
		case 1:
			sv.Spec.Type = v1.ServiceTypeNodePort
		case 2:
			sv.Spec.Type = v1.ServiceTypeLoadBalancer
			for j := range int(s.ingress) {
				sv.Status.LoadBalancer.Ingress = append(sv.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: a.lb(i, j)})
			}
			for j := range int(s.ranges) {
				sv.Spec.LoadBalancerSourceRanges = append(sv.Spec.LoadBalancerSourceRanges, a.rng(i, j))
			}
		}
		for j := range int(s.extIPs) {
			sv.Spec.ExternalIPs = append(sv.Spec.ExternalIPs, a.ext(i, j))
		}
		if s.affinity > 0 {
			sv.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			sv.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(s.affinity)}}
		}
		if s.etpLocal {
			sv.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			sv.Spec.HealthCheckNodePort = int32(32000 + i)
		}
		if s.itpLocal {
			sv.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}
	}
	if !s.slice {
		return sv, nil
	}
	at := discovery.AddressTypeIPv4
	if fam == v1.IPv6Protocol {
		at = discovery.AddressTypeIPv6
	}
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "walk", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: at,
	}
	for _, p := range ports {
		sl.Ports = append(sl.Ports, discovery.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port + 8000 + int32(s.target)), Protocol: ptr.To(p.Protocol)})
	}
	for j, e := range s.ep[:s.eps] {
		node := "node-b"
		if e.local {
			node = testNode
		}
		d := discovery.Endpoint{
			Addresses: []string{a.ep(i, j)},
			NodeName:  ptr.To(node),
			Conditions: discovery.EndpointConditions{
				Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating),
			},
		}
		if e.zone > 0 {
			d.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: fmt.Sprintf("zone-%c", 'a'+e.zone-1)}}}
		}
		sl.Endpoints = append(sl.Endpoints, d)
	}
	return sv, sl
}

// xtwalkTransition hands p the events that turn from into to.
func xtwalkTransition(p *Proxier, fam v1.IPFamily, from, to xtState) {
	for i := range xtwalkSlots {
		fs, fe := from[i].objects(fam, i)
		ts, te := to[i].objects(fam, i)
		switch {
		case fs == nil && ts != nil:
			p.OnServiceAdd(ts)
		case fs != nil && ts == nil:
			p.OnServiceDelete(fs)
		case fs != nil:
			p.OnServiceUpdate(fs, ts)
		}
		switch {
		case fe == nil && te != nil:
			p.OnEndpointSliceAdd(te)
		case fe != nil && te == nil:
			p.OnEndpointSliceDelete(fe)
		case fe != nil:
			p.OnEndpointSliceUpdate(fe, te)
		}
	}
}

// xtwalkConfig varies the configuration with the seed: node port
// addresses (all, or one CIDR), localhost node ports (IPv4), masquerade
// all.
func xtwalkConfig(fam v1.IPFamily, seed uint64) Config {
	cfg := Config{
		Common: engine.Common{NodeName: testNode},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{
				netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("127.0.0.1"),
				netip.MustParseAddr("fd00:1::2"), netip.MustParseAddr("::1"),
			}, nil
		},
		Netfilter: engine.Netfilter{
			MasqueradeAll: seed%3 == 0,
		},
	}
	if fam == v1.IPv4Protocol {
		cfg.LocalDetector = proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.0.0.0/8")}
		cfg.LocalhostNodePorts = seed%2 == 1
		if seed%2 == 0 {
			cfg.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}
		}
	} else {
		cfg.LocalDetector = proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("fd00:10::/32")}
		if seed%2 == 0 {
			cfg.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("fd00:1::/64")}
		}
	}
	return cfg
}

// xtwalkResult is what one side saw after one step.
type xtwalkResult struct {
	err      error
	tamper   error
	full     bool
	save     string // iptables-legacy-save without counters
	counters string // iptables-legacy-save -c
	digests  [3]nfgen.Digest
	restores [][]byte
}

// xtwalkRecorder records the Restore inputs of a Runner and passes on the
// interfaces the Proxier looks for (so that it behaves as over the Runner
// itself: table stamps, one read of every table, no chunking in process).
type xtwalkRecorder struct {
	xtables.Runner
	restores [][]byte
}

func (r *xtwalkRecorder) Restore(ctx context.Context, in xtables.RestoreInput) error {
	r.restores = append(r.restores, bytes.Clone(in.Text))
	return r.Runner.Restore(ctx, in)
}

// xtwalkTables are the tables compared by blob hash.
var xtwalkTables = [3]string{"nat", "filter", "mangle"}

// xtwalkCounters matches the counters of a chain line of iptables-save,
// xtwalkRuleCounters those of a rule line of iptables-save -c.
var (
	xtwalkCounters     = regexp.MustCompile(`(?m) \[\d+:\d+\]$`)
	xtwalkRuleCounters = regexp.MustCompile(`(?m)^\[\d+:\d+\] `)
)

// xtwalkTraffic sends n datagrams over the loopback to a socket of the
// namespace, so that the built-in chains' policies and rules, ours and
// foreign ones, count something the restores must keep (or zero) as the
// tool does. It is the same traffic on both sides: a new flow's first
// packet, then established ones, none answered.
func xtwalkTraffic(t *testing.T, fam v1.IPFamily, n int) {
	t.Helper()
	network, addr := "udp4", "127.0.0.1:0"
	if fam == v1.IPv6Protocol {
		network, addr = "udp6", "[::1]:0"
	}
	ln, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 100)
	for range n {
		if _, err := c.Write([]byte("xtwalk")); err != nil {
			t.Fatal(err)
		}
		if err := ln.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ln.ReadFrom(buf); err != nil {
			t.Fatalf("loopback datagram: %v", err)
		}
	}
}

// xtwalkRun runs the script on one side, in the calling thread's network
// namespace: with the tool (ref == nil, returning what it saw) or in
// process (comparing each step with ref).
func xtwalkRun(t *testing.T, fam v1.IPFamily, cfg Config, tool bool, script []xtStep, ref []xtwalkResult, hashSeed maphash.Seed) []xtwalkResult {
	t.Helper()
	ctx := context.Background()
	// The in-process Runner counts the inputs it hands to the tool: one it
	// cannot encode (which must not happen: it encodes everything the
	// engine writes), or one whose write was refused (then the tool has
	// the last word, and must refuse it too: the sync fails on both
	// sides, which xtwalkCompare checks).
	var handedUn, handedRf uint64
	real, err := xtables.New(xtables.RunnerConfig{Family: fam, Backend: xtables.BackendLegacy, LegacyTool: tool})
	if err != nil {
		t.Skipf("legacy backend: %v", err)
	}
	inProc := real.(xtables.InProcessRestorer)
	if !tool && !inProc.RestoresInProcess() {
		t.Skip("the in-process restore is off on this kernel (see the Runner's log)")
	}
	rec := &xtwalkRecorder{Runner: real}
	p, err := NewProxier(cfg, Interfaces{IPTables: rec, Sysctl: iptablestest.NewSysctl(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{
		v1.LabelHostname: testNode, v1.LabelTopologyZone: "zone-a",
	}}}
	p.OnNodeAdd(node)
	p.OnNodeSynced()

	prefix := "iptables-legacy"
	if fam == v1.IPv6Protocol {
		prefix = "ip6tables-legacy"
	}
	if b, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, b)
	}
	side := "in process"
	if tool {
		side = "tool"
	}
	var out []xtwalkResult
	var cur xtState
	for step, st := range script {
		var res xtwalkResult
		xtwalkTransition(p, fam, cur, st.state)
		cur = st.state
		if st.zone != "" {
			n := node.DeepCopy()
			n.Labels[v1.LabelTopologyZone] = st.zone
			p.OnNodeUpdate(node, n)
			node = n
		}
		if st.tamper > 0 {
			for _, cmd := range xtwalkTampers[st.tamper-1] {
				args := slices.Concat(cmd, []string{"-w", "5"})
				if b, err := exec.Command(prefix, args...).CombinedOutput(); err != nil {
					res.tamper = errors.Join(res.tamper, fmt.Errorf("%v: %v: %s", cmd, err, bytes.TrimSpace(b)))
				}
			}
		}
		if st.full {
			p.RequestFullSync()
		}
		rec.restores = nil
		res.err = p.Sync(ctx)
		res.full = p.Stats().Last.Full
		res.restores = rec.restores
		xtwalkTraffic(t, fam, 1+step%3)
		b, err := exec.Command(prefix+"-save", "-c").Output()
		if err != nil {
			t.Fatalf("%s-save: %v", prefix, err)
		}
		res.counters = xtwalkNormalize(string(b))
		res.save = xtwalkRuleCounters.ReplaceAllString(xtwalkCounters.ReplaceAllString(res.counters, ""), "")
		for i, table := range xtwalkTables {
			d, _, err := nfgen.LegacyDigest(fam == v1.IPv6Protocol, table, hashSeed)
			if err != nil {
				t.Fatal(err)
			}
			res.digests[i] = d
		}
		if !tool {
			un, rf := inProc.HandedToTool()
			un, rf, handedUn, handedRf = un-handedUn, rf-handedRf, un, rf
			if !inProc.RestoresInProcess() || un > 0 {
				t.Fatalf("step %d%s (%s): the in-process Runner handed input to the tool (RestoresInProcess %v, %d unsupported, %d refused)\ninputs:\n%s",
					step, st, side, inProc.RestoresInProcess(), un, rf, xtwalkInputs(res.restores))
			}
			if rf > 0 && res.err == nil {
				t.Fatalf("step %d%s (%s): %d refused in-process restores, yet the sync succeeded", step, st, side, rf)
			}
		}
		if ref != nil {
			xtwalkCompare(t, step, st, ref[step], res)
		} else if res.err != nil {
			t.Logf("step %d%s: the tool's sync failed: %v", step, st, res.err)
		}
		out = append(out, res)
	}
	var wrote, lines, full, failed, tamperFailed, maxRules int
	ops := map[string]int{}
	for _, r := range out {
		if len(r.restores) > 0 {
			wrote++
		}
		for _, in := range r.restores {
			lines += bytes.Count(in, []byte("\n"))
			for _, op := range []string{"-A", "-I", "-D", "-F", "-X"} {
				ops[op] += bytes.Count(in, []byte("\n"+op+" "))
			}
		}
		if r.full {
			full++
		}
		if r.err != nil {
			failed++
		}
		if r.tamper != nil {
			tamperFailed++
		}
		maxRules = max(maxRules, strings.Count(r.save, "\n-A "))
	}
	t.Logf("%s: %d syncs, %d wrote (%d lines: %v), %d full, %d failed, %d hand edits refused; at most %d rules",
		side, len(out), wrote, lines, ops, full, failed, tamperFailed, maxRules)
	if wrote < len(out)/4 {
		t.Errorf("%s: only %d of %d syncs wrote anything", side, wrote, len(out))
	}
	return out
}

// xtwalkNormalize drops what iptables-legacy-save prints that is not the
// tables' content: the comment lines (its version, the time) and the
// packet and byte counters of the chain lines (the built-in chains count
// what traffic the namespace had, which is none here, but they are not
// ours to compare).
func xtwalkNormalize(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			l = xtwalkCounters.ReplaceAllString(l, "")
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func xtwalkInputs(restores [][]byte) string {
	var b strings.Builder
	for i, r := range restores {
		fmt.Fprintf(&b, "--- restore %d ---\n%s", i+1, r)
	}
	return b.String()
}

// xtwalkCompare requires the in-process side's step (got) to match the
// tool's (want).
func xtwalkCompare(t *testing.T, step int, st xtStep, want, got xtwalkResult) {
	t.Helper()
	if (want.tamper == nil) != (got.tamper == nil) {
		t.Fatalf("step %d%s: the hand edit: tool side %v, in-process side %v", step, st, want.tamper, got.tamper)
	}
	if (want.err == nil) != (got.err == nil) {
		t.Fatalf("step %d%s: sync with the tool: %v; in process: %v\ninputs (tool side):\n%s\ninputs (in process):\n%s",
			step, st, want.err, got.err, xtwalkInputs(want.restores), xtwalkInputs(got.restores))
	}
	if want.err != nil {
		var we, ge *xtables.RestoreError
		if errors.As(want.err, &we) && errors.As(got.err, &ge) && we.Line != ge.Line {
			t.Errorf("step %d%s: the tool refused line %d (%q), the in-process restore line %d (%q)",
				step, st, we.Line, we.LineText, ge.Line, ge.LineText)
		}
	}
	if want.full != got.full {
		t.Errorf("step %d%s: full sync with the tool %v, in process %v", step, st, want.full, got.full)
	}
	if want.save != got.save {
		t.Fatalf("step %d%s: iptables-legacy-save differs (- tool, + in process):\n%s\ninputs (tool side):\n%s\ninputs (in process):\n%s",
			step, st, xtwalkDiff(want.save, got.save), xtwalkInputs(want.restores), xtwalkInputs(got.restores))
	}
	if want.counters != got.counters {
		t.Fatalf("step %d%s: the counters differ (iptables-legacy-save -c; - tool, + in process):\n%s\ninputs (in process):\n%s",
			step, st, xtwalkDiff(want.counters, got.counters), xtwalkInputs(got.restores))
	}
	for i, table := range xtwalkTables {
		if want.digests[i] != got.digests[i] {
			t.Fatalf("step %d%s: table %s: the blobs differ though the listings agree: tool %+v, in process %+v\ninputs (in process):\n%s",
				step, st, table, want.digests[i], got.digests[i], xtwalkInputs(got.restores))
		}
	}
	if want.err != nil {
		t.Logf("step %d%s: both syncs failed: tool %v; in process %v", step, st, want.err, got.err)
	}
}

// xtwalkDiff shows where two listings part: the lines only in want (-)
// and only in got (+), and, as the order of rules matters too, the first
// line that differs with a few lines around it on each side.
func xtwalkDiff(want, got string) string {
	var b strings.Builder
	b.WriteString(lineDiff(want, got))
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	lo := max(i-3, 0)
	fmt.Fprintf(&b, "first difference at line %d; tool:\n", i+1)
	for _, l := range w[lo:min(i+4, len(w))] {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	b.WriteString("in process:\n")
	for _, l := range g[lo:min(i+4, len(g))] {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}
