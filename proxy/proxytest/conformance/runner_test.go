package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// fakeProvider records events and honours the ErrNotSynced contract
// (unless sloppy).
type fakeProvider struct {
	*proxytest.Recorder
	svcSynced, epSynced bool
	sloppy              bool
	syncs               int
}

func (p *fakeProvider) OnServiceSynced()        { p.svcSynced = true }
func (p *fakeProvider) OnEndpointSlicesSynced() { p.epSynced = true }
func (p *fakeProvider) Sync(ctx context.Context) error {
	if !p.sloppy && !(p.svcSynced && p.epSynced) {
		return proxy.ErrNotSynced
	}
	p.syncs++
	return nil
}
func (p *fakeProvider) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// constTracer answers every packet with the same result.
type constTracer struct{ r proxytest.Result }

func (c constTracer) Trace(proxytest.Packet) (proxytest.Result, error) { return c.r, nil }
func (c constTracer) Dump() string                                     { return "FAKE-DUMP" }

// tinyTable is one scenario of two steps; the second step's check "c"
// wants a rejection that constTracer never gives.
func tinyTable(topo proxytest.Topology) []proxytest.Scenario {
	svc := proxytest.MakeService(topo, "web", topo.ServiceIP(1), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
	ck := func(name string, want proxytest.Result) proxytest.Check {
		return proxytest.Check{Name: name, Packet: proxytest.FromPodTo(topo, topo.ServiceIP(1), 80), Want: want}
	}
	notProxied := proxytest.Result{Verdict: proxytest.NotProxied}
	return []proxytest.Scenario{{
		Name: "tiny",
		Steps: []proxytest.Step{
			{Name: "one", Objects: proxytest.Objects{Services: []*v1.Service{svc}}, Checks: []proxytest.Check{ck("a", notProxied)}},
			{Name: "two", Objects: proxytest.Objects{}, Checks: []proxytest.Check{ck("b", notProxied), ck("c", proxytest.Result{Verdict: proxytest.Rejected})}},
		},
	}}
}

func TestRunScenariosPassesAndAppliesQuirks(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	var p *fakeProvider
	conformance.RunScenarios(t, topo, tinyTable(topo), conformance.Harness{
		New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			p = &fakeProvider{Recorder: &proxytest.Recorder{}}
			return p, constTracer{proxytest.Result{Verdict: proxytest.NotProxied}}
		},
		Quirks: []proxytest.Quirk{{Scenario: "tiny", Step: "two", Check: "c", Reason: "test: this engine does not reject",
			Adjust: func(r proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.NotProxied} }}},
	})
	if p.syncs != 2 {
		t.Errorf("Sync called %d times after synced, want 2 (one per step)", p.syncs)
	}
}

// TestRunScenariosReports runs failing harnesses in a child process and
// checks what the runner reports.
func TestRunScenariosReports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child test process")
	}
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"mismatch", []string{`scenario "tiny" step "two" check "c"`, "packet: pod 10.244.1.9 -> 10.96.0.1:80/TCP", "want:   rejected", "got:    not-proxied", "FAKE-DUMP"}},
		{"sloppy", []string{
			"Sync before the initial lists were reported synced returned <nil>, want proxy.ErrNotSynced",
			`scenario "tiny" step "two" check "c": skipped: test: skip c`,
		}},
		{"quirk-without-reason", []string{`quirk for scenario "tiny" has no Reason`}},
		{"skip-quirk-unknown-check", []string{`scenario "tiny" has no step "one" with check "zz"`}},
		{"nil-new", []string{"conformance: Harness.New is nil"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRunner$", "-test.v")
			cmd.Env = append(os.Environ(), "CONFORMANCE_HELPER="+tc.mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("child passed, want a failure; output:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestHelperRunner(t *testing.T) {
	mode := os.Getenv("CONFORMANCE_HELPER")
	if mode == "" {
		t.Skip("helper for TestRunScenariosReports")
	}
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	h := conformance.Harness{New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
		return &fakeProvider{Recorder: &proxytest.Recorder{}, sloppy: mode == "sloppy"}, constTracer{proxytest.Result{Verdict: proxytest.NotProxied}}
	}}
	switch mode {
	case "sloppy":
		h.Quirks = []proxytest.Quirk{{Scenario: "tiny", Check: "c", Reason: "test: skip c"}}
	case "quirk-without-reason":
		h.Quirks = []proxytest.Quirk{{Scenario: "tiny"}}
	case "skip-quirk-unknown-check":
		h.Quirks = []proxytest.Quirk{{Scenario: "tiny", Step: "one", Check: "zz", Reason: "skip"}}
	case "nil-new":
		h.New = nil
	}
	conformance.RunScenarios(t, topo, tinyTable(topo), h)
}

// TestRunWholeTable runs the real table for both families against an
// engine that forwards nothing, with every check skipped by one quirk per
// scenario: the runner accepts the table and feeds every step.
func TestRunWholeTable(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(fam)
		var quirks []proxytest.Quirk
		steps := 0
		for _, sc := range proxytest.Scenarios(topo) {
			quirks = append(quirks, proxytest.Quirk{Scenario: sc.Name, Reason: "test: runner only"})
			steps += len(sc.Steps)
		}
		syncs := 0
		t.Run(string(fam), func(t *testing.T) {
			conformance.Run(t, fam, conformance.Harness{
				New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
					p := &fakeProvider{Recorder: &proxytest.Recorder{}}
					t.Cleanup(func() { syncs += p.syncs })
					return p, constTracer{proxytest.Result{Verdict: proxytest.Dropped}}
				},
				Quirks: quirks,
			})
		})
		if syncs != steps {
			t.Errorf("%s: %d syncs after synced, want one per step (%d)", fam, syncs, steps)
		}
	}
}

// countingProvider programs, on each Sync, how many Services it has seen
// (on every second Sync only, when lazy); countTracer rejects while that
// is not zero and says "not proxied" otherwise.
type countingProvider struct {
	fakeProvider
	services, programmed int
	lazy                 bool
}

func (p *countingProvider) OnServiceAdd(*v1.Service)    { p.services++ }
func (p *countingProvider) OnServiceDelete(*v1.Service) { p.services-- }
func (p *countingProvider) Sync(ctx context.Context) error {
	if err := p.fakeProvider.Sync(ctx); err != nil {
		return err
	}
	if !p.lazy || p.syncs%2 == 0 {
		p.programmed = p.services
	}
	return nil
}

type countTracer struct{ p *countingProvider }

func (c countTracer) Trace(proxytest.Packet) (proxytest.Result, error) {
	if c.p.programmed > 0 {
		return proxytest.Result{Verdict: proxytest.Rejected}, nil
	}
	return proxytest.Result{Verdict: proxytest.NotProxied}, nil
}

// onOffTable: a Service that is rejected while it exists, in two
// scenarios (so the second starts from the first's state cleared).
func onOffTable(topo proxytest.Topology) []proxytest.Scenario {
	var table []proxytest.Scenario
	for _, name := range []string{"first", "second"} {
		svc := proxytest.MakeService(topo, name, topo.ServiceIP(1), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
		ck := func(want proxytest.Verdict) []proxytest.Check {
			return []proxytest.Check{{Name: "c", Packet: proxytest.FromPodTo(topo, topo.ServiceIP(1), 80), Want: proxytest.Result{Verdict: want}}}
		}
		table = append(table, proxytest.Scenario{Name: name, Steps: []proxytest.Step{
			{Name: "on", Objects: proxytest.Objects{Services: []*v1.Service{svc}}, Checks: ck(proxytest.Rejected)},
			{Name: "off", Objects: proxytest.Objects{}, Checks: ck(proxytest.NotProxied)},
		}})
	}
	return table
}

func TestRunSequentialOneEngineForTheTable(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	news := 0
	var p *countingProvider
	conformance.RunSequential(t, topo, onOffTable(topo), conformance.Harness{
		New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			news++
			p = &countingProvider{fakeProvider: fakeProvider{Recorder: &proxytest.Recorder{}}}
			return p, countTracer{p}
		},
	}, 3)
	if news != 3 {
		t.Errorf("Harness.New called %d times, want 3 (one engine per seed)", news)
	}
	if p.syncs < 4 {
		t.Errorf("the last seed's engine synced %d times, want at least 4 (one per step)", p.syncs)
	}
}

// TestRunSequentialReports: an engine that skips every other Sync fails,
// with the seed, the step and the events since it began.
func TestRunSequentialReports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child test process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSequential$", "-test.v")
	cmd.Env = append(os.Environ(), "CONFORMANCE_HELPER=lazy")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child passed, want a failure; output:\n%s", out)
	}
	for _, w := range []string{`seed 1 scenario "second" step "on" check "c"`, "want:   rejected", "got not-proxied", "events since the last step's checks: ", "set Service conformance/second, sync"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestHelperSequential(t *testing.T) {
	if os.Getenv("CONFORMANCE_HELPER") != "lazy" {
		t.Skip("helper for TestRunSequentialReports")
	}
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	conformance.RunSequential(t, topo, onOffTable(topo), conformance.Harness{
		New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			p := &countingProvider{fakeProvider: fakeProvider{Recorder: &proxytest.Recorder{}}, lazy: true}
			return p, countTracer{p}
		},
	}, 1)
}
