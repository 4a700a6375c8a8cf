package netnstest

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	pt "github.com/svcproxy/svcproxy/proxy/proxytest"
)

func TestParseAnswer(t *testing.T) {
	a, err := ParseAnswer("pod-a1 10.244.1.9 10.244.1.2:8080\n")
	if err != nil || a.Name != "pod-a1" || a.Client.String() != "10.244.1.9" || a.Local.String() != "10.244.1.2:8080" {
		t.Errorf("ParseAnswer = %+v, %v", a, err)
	}
	a, err = ParseAnswer("world ::ffff:10.0.0.1 [::ffff:10.96.0.1]:80")
	if err != nil || a.Client.String() != "10.0.0.1" || a.Local.String() != "10.96.0.1:80" {
		t.Errorf("mapped addresses not unmapped: %+v, %v", a, err)
	}
	for _, bad := range []string{"", "pod-a1 10.0.0.1", "pod-a1 x 10.0.0.1:80", "pod-a1 10.0.0.1 10.0.0.1", "a b c d"} {
		if _, err := ParseAnswer(bad); err == nil {
			t.Errorf("ParseAnswer(%q) accepted", bad)
		}
	}
}

// TestExec checks that Exec enters the namespace, returns f's error,
// re-raises panics, survives Goexit, and never leaves another goroutine's
// thread in the namespace.
func TestExec(t *testing.T) {
	SkipUnlessRoot(t)
	ns, err := newNamespace("exec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.close(); err != nil {
			t.Error(err)
		}
	})

	var inside []string
	err = Exec(ns, func() error {
		if !ns.Current() {
			return errors.New("not in the namespace")
		}
		links, err := netlink.LinkList()
		for _, l := range links {
			inside = append(inside, l.Attrs().Name)
		}
		return err
	})
	if err != nil || len(inside) != 1 || inside[0] != "lo" {
		t.Fatalf("inside a fresh namespace: links %v, err %v; want just lo", inside, err)
	}
	if want := errors.New("mine"); !errors.Is(Exec(ns, func() error { return want }), want) {
		t.Error("f's error not returned")
	}
	if err := Exec(ns, func() error { runtime.Goexit(); return nil }); err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Errorf("Goexit in f: err = %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want boom", r)
			}
		}()
		_ = Exec(ns, func() error { panic("boom") })
		t.Error("panic in f not re-raised")
	}()

	// Many Execs at once, while other goroutines check they are never
	// scheduled on a thread left in the namespace.
	var wg sync.WaitGroup
	var bad sync.Map
	for i := 0; i < 20; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = Exec(ns, func() error { return nil })
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				runtime.LockOSThread()
				if ns.Current() {
					bad.Store(j, true)
				}
				runtime.UnlockOSThread()
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	bad.Range(func(k, v any) bool {
		t.Errorf("a goroutine ran on a thread left in %s", ns.Name)
		return false
	})
	if ns.Current() {
		t.Error("test goroutine is in the namespace")
	}
}

// staticProvider loads the hand-written rules when synced, and refuses to
// touch anything unless it runs inside the node namespace.
type staticProvider struct {
	*pt.Recorder
	env                 *Env
	t                   *testing.T
	svcSynced, epSynced bool
}

func (p *staticProvider) OnServiceSynced()        { p.svcSynced = true }
func (p *staticProvider) OnEndpointSlicesSynced() { p.epSynced = true }
func (p *staticProvider) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (p *staticProvider) Sync(ctx context.Context) error {
	if !p.svcSynced || !p.epSynced {
		return proxy.ErrNotSynced
	}
	if !p.env.Node.Current() {
		return errors.New("Sync is not running inside the node namespace")
	}
	return restoreHere(p.env, handRules(p.env.Topo))
}

// TestRunKernelScenarios drives RunKernelScenarios with a provider that
// ignores objects and loads fixed rules, to prove the plumbing: a fresh
// Env per scenario, Sync inside the node namespace, the prober as tracer.
func TestRunKernelScenarios(t *testing.T) {
	SkipUnlessRoot(t)
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := pt.DefaultTopology(fam)
			a1, b1 := topo.LocalPods[0], topo.RemotePods[0]
			svc := pt.MakeService(topo, "web", topo.ServiceIP(1), []pt.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
			scenarios := []pt.Scenario{{
				Name: "static",
				Steps: []pt.Step{{
					Name:    "rules",
					Objects: pt.Objects{Services: []*v1.Service{svc}},
					Checks: []pt.Check{
						{Name: "pod", Packet: pt.FromPodTo(topo, topo.ServiceIP(1), 80), Want: pt.ForwardedTo(false, pt.Backends(8080, a1, b1)...)},
						{Name: "external", Packet: pt.FromExternalTo(topo, topo.ServiceIP(1), 80), Want: pt.ForwardedTo(true, pt.Backends(8080, a1, b1)...)},
						{Name: "rejected", Packet: pt.FromNodeTo(topo, topo.ServiceIP(4), 80), Want: pt.Result{Verdict: pt.Rejected}},
					},
				}},
			}}
			var envs []*Env
			RunKernelScenarios(t, topo, scenarios, KernelHarness{
				New: func(t *testing.T, env *Env, opts pt.Options) proxy.Provider {
					envs = append(envs, env)
					return &staticProvider{Recorder: &pt.Recorder{}, env: env, t: t}
				},
			})
			if len(envs) != 1 {
				t.Errorf("New called %d times, want 1", len(envs))
			}
		})
	}
	if l := leftovers(t); len(l) != 0 {
		t.Errorf("namespaces left behind: %v", l)
	}
}
