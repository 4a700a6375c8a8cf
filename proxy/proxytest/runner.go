package proxytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcproxy/svcproxy/proxy"
)

// SyncTimeout bounds each Sync the runner makes.
const SyncTimeout = 2 * time.Minute

// Harness is what an engine's test supplies to run the conformance table.
type Harness struct {
	// New builds a fresh engine for one scenario, configured for topo (see
	// Topology) and opts, and the tracer that answers for what it
	// programs. It is called once per scenario, inside the scenario's
	// subtest; it may call t.Skip (for example when the engine has no
	// masquerade-all option) and should register its cleanup with
	// t.Cleanup. Required.
	New func(t *testing.T, topo Topology, opts Options) (proxy.Provider, Tracer)
	// Quirks are this engine's known, explained differences from the
	// table. A quirk without a Reason, or one naming a scenario of the run
	// but matching none of its checks, fails the run before anything
	// else, so stale quirks do not pile up.
	Quirks []Quirk
}

// Run runs the whole conformance table for family against the engine h
// builds, one subtest per scenario.
func Run(t *testing.T, family v1.IPFamily, h Harness) {
	t.Helper()
	topo := DefaultTopology(family)
	RunScenarios(t, topo, Scenarios(topo), h)
}

// RunScenarios runs the given scenarios (for example a filtered Scenarios)
// against the engine h builds.
//
// For each scenario it builds an engine with h.New and a Feeder over it;
// it feeds the first step, checks that Sync returns proxy.ErrNotSynced
// before the initial lists are reported synced, reports them synced, and
// then for every step feeds the objects (adds, updates and deletes against
// the previous step), calls Sync, and traces every check. A failed Sync
// ends the scenario; every mismatching check is reported with its
// scenario, step and check name, the packet, and want against got; the
// remaining steps still run. When the tracer has a Dump() string method,
// its output is logged after a step with a failure.
func RunScenarios(t *testing.T, topo Topology, scenarios []Scenario, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("proxytest: Harness.New is nil")
	}
	if err := Validate(topo, scenarios); err != nil {
		t.Fatalf("proxytest: invalid scenarios: %v", err)
	}
	if err := validateQuirks(scenarios, h.Quirks); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			runScenario(t, topo, sc, h)
		})
	}
}

func runScenario(t *testing.T, topo Topology, sc Scenario, h Harness) {
	p, tr := h.New(t, topo, sc.Options)
	if p == nil || tr == nil {
		t.Fatalf("proxytest: Harness.New returned a nil provider or tracer")
	}
	f := NewFeeder(p)
	ctx := t.Context()
	for i, st := range sc.Steps {
		where := fmt.Sprintf("scenario %q step %q", sc.Name, st.Name)
		if err := f.Apply(st.Objects); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if i == 0 {
			if err := syncWithTimeout(ctx, p); !errors.Is(err, proxy.ErrNotSynced) {
				t.Errorf("%s: Sync before the initial lists were reported synced returned %v, want proxy.ErrNotSynced", where, err)
			}
			f.Synced()
		}
		if err := syncWithTimeout(ctx, p); err != nil {
			t.Fatalf("%s: Sync: %v", where, err)
		}
		failed := false
		for _, c := range st.Checks {
			want, skip := quirkedWant(h.Quirks, sc.Name, st.Name, c)
			if skip != "" {
				t.Logf("%s check %q: skipped: %s", where, c.Name, skip)
				continue
			}
			got, sampled, err := trace(tr, c.Packet, want)
			if err != nil {
				t.Errorf("%s check %q:\n  packet: %s\n  want:   %s\n  error:  %v", where, c.Name, c.Packet, want, err)
				failed = true
				continue
			}
			if why := Match(want, got, sampled); why != "" {
				t.Errorf("%s check %q:\n  packet: %s\n  want:   %s\n  got:    %s\n  why:    %s", where, c.Name, c.Packet, want, got, why)
				failed = true
			}
		}
		if failed {
			if d, ok := tr.(interface{ Dump() string }); ok {
				t.Logf("%s: dataplane:\n%s", where, d.Dump())
			}
		}
	}
}

func syncWithTimeout(ctx context.Context, p proxy.Provider) error {
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	return p.Sync(ctx)
}

// trace asks tr about p, through TraceSample when tr is a Sampler.
func trace(tr Tracer, p Packet, want Result) (got Result, sampled bool, err error) {
	if s, ok := tr.(Sampler); ok {
		got, err = s.TraceSample(p, want)
		return got, true, err
	}
	got, err = tr.Trace(p)
	return got, false, err
}

func validateQuirks(scenarios []Scenario, quirks []Quirk) error {
	for _, q := range quirks {
		if q.Reason == "" {
			return fmt.Errorf("quirk for scenario %q has no Reason", q.Scenario)
		}
		if q.Scenario == "" {
			return fmt.Errorf("quirk %q names no scenario", q.Reason)
		}
		found := false
		for _, sc := range scenarios {
			for _, st := range sc.Steps {
				for _, c := range st.Checks {
					found = found || q.matches(sc.Name, st.Name, c.Name)
				}
			}
		}
		if !found && slices.ContainsFunc(scenarios, func(sc Scenario) bool { return sc.Name == q.Scenario }) {
			return fmt.Errorf("quirk %q: scenario %q has no step %q with check %q", q.Reason, q.Scenario, q.Step, q.Check)
		}
	}
	return nil
}

// Validate checks a table against its topology: names are unique and not
// empty, every packet comes from where its Origin says (a pod of this
// node, the node IP, an external client), every address is of the
// topology's family, every service port, target port and slice port is in
// Topology.ServerPorts (so the real-kernel harness has a listener), every
// wanted backend is a pod, and not-proxied packets go to addresses where
// something answers (a pod, or the service, external-IP and load-balancer
// ranges behind the node's default route).
func Validate(topo Topology, scenarios []Scenario) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seenSc := map[string]bool{}
	for _, sc := range scenarios {
		if sc.Name == "" || seenSc[sc.Name] {
			bad("scenario name %q empty or duplicate", sc.Name)
		}
		seenSc[sc.Name] = true
		if len(sc.Steps) == 0 {
			bad("scenario %q has no steps", sc.Name)
		}
		seenSt := map[string]bool{}
		for _, st := range sc.Steps {
			where := fmt.Sprintf("scenario %q step %q", sc.Name, st.Name)
			if st.Name == "" || seenSt[st.Name] {
				bad("%s: step name empty or duplicate", where)
			}
			seenSt[st.Name] = true
			if len(st.Checks) == 0 {
				bad("%s: no checks", where)
			}
			for _, err := range validateObjects(topo, st.Objects) {
				bad("%s: %v", where, err)
			}
			seenCk := map[string]bool{}
			for _, c := range st.Checks {
				if c.Name == "" || seenCk[c.Name] {
					bad("%s: check name %q empty or duplicate", where, c.Name)
				}
				seenCk[c.Name] = true
				if err := validateCheck(topo, c); err != nil {
					bad("%s check %q: %v", where, c.Name, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func validateObjects(topo Topology, o Objects) []error {
	var errs []error
	for _, s := range o.Services {
		if s == nil {
			continue // Feeder reports it
		}
		for _, p := range s.Spec.Ports {
			if !slices.Contains(topo.ServerPorts, int(p.Port)) {
				errs = append(errs, fmt.Errorf("service %s port %d not in ServerPorts", s.Name, p.Port))
			}
			if p.TargetPort.Type == intstr.Int && !slices.Contains(topo.ServerPorts, p.TargetPort.IntValue()) {
				errs = append(errs, fmt.Errorf("service %s targetPort %s not in ServerPorts", s.Name, p.TargetPort.String()))
			}
		}
	}
	for _, s := range o.EndpointSlices {
		if s == nil {
			continue
		}
		for _, p := range s.Ports {
			if p.Port != nil && !slices.Contains(topo.ServerPorts, int(*p.Port)) {
				errs = append(errs, fmt.Errorf("endpoint slice %s port %d not in ServerPorts", s.Name, *p.Port))
			}
		}
	}
	return errs
}

func validateCheck(topo Topology, c Check) error {
	p := c.Packet
	fam := func(a interface{ Is4() bool }) bool { return a.Is4() == (topo.Family == v1.IPv4Protocol) }
	if !p.Src.IsValid() || !p.Dst.IsValid() || !fam(p.Src) || !fam(p.Dst) {
		return fmt.Errorf("packet %s: addresses must be valid %s addresses", p, topo.Family)
	}
	if p.Port < 1 || p.Port > 65535 {
		return fmt.Errorf("packet %s: bad port", p)
	}
	switch p.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP:
	default:
		return fmt.Errorf("packet %s: protocol must be TCP or UDP", p)
	}
	if p.SrcPort < 0 || p.SrcPort > 65535 || (p.SrcPort != 0 && p.Protocol != v1.ProtocolUDP) {
		return fmt.Errorf("packet %s: a source port must be valid and is only for UDP", p)
	}
	if p.SrcPort != 0 && c.Want.Verdict == Forwarded && len(c.Want.Backends) != 1 {
		return fmt.Errorf("packet %s: with a fixed source port every datagram follows one conntrack entry; want exactly one backend", p)
	}
	switch p.Origin {
	case FromPod:
		if pod, ok := topo.PodByIP(p.Src); !ok || pod.Node != topo.NodeName {
			return fmt.Errorf("packet %s: a FromPod source must be a pod on %s", p, topo.NodeName)
		}
	case FromNode:
		if p.Src != topo.NodeIP {
			return fmt.Errorf("packet %s: a FromNode source must be the node IP %s", p, topo.NodeIP)
		}
	case FromExternal:
		if p.Src != topo.ExternalClient && p.Src != topo.ExternalClient2 {
			return fmt.Errorf("packet %s: a FromExternal source must be an external client", p)
		}
	default:
		return fmt.Errorf("packet %s: unknown origin", p)
	}
	w := c.Want
	switch w.Verdict {
	case Forwarded:
		if len(w.Backends) == 0 {
			return fmt.Errorf("forwarded with no backends")
		}
		for _, b := range w.Backends {
			if _, ok := topo.PodByIP(b.Addr()); !ok || !slices.Contains(topo.ServerPorts, int(b.Port())) {
				return fmt.Errorf("backend %s is not a pod address with a server port", b)
			}
		}
	case NotProxied:
		_, isPod := topo.PodByIP(p.Dst)
		routed := topo.ServiceCIDR.Contains(p.Dst) || topo.ExternalIPRange.Contains(p.Dst) || topo.LoadBalancerRange.Contains(p.Dst)
		if !isPod && !routed {
			return fmt.Errorf("not-proxied packet %s must go to a pod or to the service, external-IP or load-balancer ranges", p)
		}
		if !slices.Contains(topo.ServerPorts, p.Port) {
			return fmt.Errorf("not-proxied packet %s must use a port in ServerPorts", p)
		}
	case Rejected, Dropped:
	default:
		return fmt.Errorf("unknown verdict %d", w.Verdict)
	}
	return nil
}

// Names lists "scenario/step/check" for every check of the table, for
// building quirk lists and documentation.
func Names(scenarios []Scenario) []string {
	var out []string
	for _, sc := range scenarios {
		for _, st := range sc.Steps {
			for _, c := range st.Checks {
				out = append(out, strings.Join([]string{sc.Name, st.Name, c.Name}, "/"))
			}
		}
	}
	return out
}
