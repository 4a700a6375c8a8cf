package netnstest

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// KernelHarness is what an engine's real-kernel test supplies.
type KernelHarness struct {
	// New builds the engine for env.Topo and opts, programming the node
	// namespace env.Node: its Runner must exec iptables (iptables-restore,
	// ...) from the goroutine that calls Sync, because RunKernel calls
	// Sync and Run inside Exec(env.Node, ...). Anything New itself must
	// do in the node (probing iptables features, say) it does inside
	// Exec(env.Node, ...) too. It may call t.Skip and should register its
	// cleanup with t.Cleanup (env is removed after it). Required.
	New func(t *testing.T, env *Env, opts proxytest.Options) proxy.Provider
	// Quirks: see conformance.Harness; they apply as they do there.
	Quirks []proxytest.Quirk
}

// RunKernel runs the whole conformance table for family on the real
// kernel, through the conformance runner (proxy/proxytest/conformance):
// every scenario gets a fresh Env (NewEnv), an engine from h.New, and the
// Prober as its tracer. It skips unless root on Linux.
func RunKernel(t *testing.T, family v1.IPFamily, h KernelHarness) {
	t.Helper()
	SkipUnlessRoot(t)
	topo := proxytest.DefaultTopology(family)
	RunKernelScenarios(t, topo, proxytest.Scenarios(topo), h)
}

// RunKernelScenarios is RunKernel for a chosen topology and scenario list.
func RunKernelScenarios(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h KernelHarness) {
	t.Helper()
	SkipUnlessRoot(t)
	if h.New == nil {
		t.Fatal("netnstest: KernelHarness.New is nil")
	}
	conformance.RunScenarios(t, topo, scenarios, conformance.Harness{
		New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			env := NewEnv(t, topo)
			p := h.New(t, env, opts)
			if p == nil {
				t.Fatal("netnstest: KernelHarness.New returned nil")
			}
			return InNamespace(p, env.Node), env.Prober()
		},
		Quirks: h.Quirks,
	})
}

// InNamespace wraps p so that Sync and Run execute inside ns (see Exec);
// the handlers only record and run on the caller's thread.
func InNamespace(p proxy.Provider, ns *Namespace) proxy.Provider {
	return &nsProvider{Provider: p, ns: ns}
}

type nsProvider struct {
	proxy.Provider
	ns *Namespace
}

func (n *nsProvider) Sync(ctx context.Context) error {
	return Exec(n.ns, func() error { return n.Provider.Sync(ctx) })
}

func (n *nsProvider) Run(ctx context.Context) error {
	return Exec(n.ns, func() error { return n.Provider.Run(ctx) })
}
