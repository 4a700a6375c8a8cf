package kerneltest

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Env is one built conformance topology: the node's namespace (Node,
// which the engine programs) and every namespace around it (World,
// External, External2, Pods), with servers running.
type Env = netnstest.Env

// Namespace is a named network namespace made by the test.
type Namespace = netnstest.Namespace

// Prober answers a proxytest.Packet with real connections from the
// namespace matching its Origin and Src (a proxytest.Tracer and
// proxytest.Sampler).
type Prober = netnstest.Prober

// Answer is what a test server replies: its name, the client address it
// saw and the address it was reached on.
type Answer = netnstest.Answer

// Harness is what a kernel conformance test supplies: New builds the
// engine for env.Topo and opts (anything it does in the kernel goes
// through Exec(env.Node, ...)); Quirks are the engine's explained
// differences from the table.
type Harness = netnstest.KernelHarness

// Bounds of the prober.
const (
	DefaultMaxAttempts = netnstest.DefaultMaxAttempts
	DefaultTimeout     = netnstest.DefaultTimeout
)

// Run runs the whole conformance table for family with real packets:
// a fresh Env per scenario, an engine from h.New, the Prober as tracer.
// It skips unless root on Linux.
func Run(t *testing.T, family v1.IPFamily, h Harness) {
	t.Helper()
	netnstest.RunKernel(t, family, h)
}

// RunScenarios is Run for a chosen topology and list of scenarios
// (proxytest.Scenarios(topo), a subset, or proxytest.Shuffle of them).
func RunScenarios(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h Harness) {
	t.Helper()
	netnstest.RunKernelScenarios(t, topo, scenarios, h)
}

// NewEnv builds topo in fresh namespaces, removed in t.Cleanup; for a
// test that drives an engine its own way (see Run for the usual one).
func NewEnv(t testing.TB, topo proxytest.Topology) *Env { return netnstest.NewEnv(t, topo) }

// Exec runs f on an OS thread inside ns: sockets it opens and commands it
// starts belong to ns.
func Exec(ns *Namespace, f func() error) error { return netnstest.Exec(ns, f) }

// SkipUnlessRoot skips t, saying why, unless it runs as root on Linux.
func SkipUnlessRoot(t testing.TB) { netnstest.SkipUnlessRoot(t) }

// ParseAnswer parses a test server's reply.
func ParseAnswer(s string) (Answer, error) { return netnstest.ParseAnswer(s) }

// Main runs a package's tests (call it from TestMain) with a private
// xtables lock file, so iptables in the test's namespaces never waits on
// the host's /run/xtables.lock or on another package's tests.
func Main(m *testing.M) int { return netnstest.Main(m) }

// InNamespace wraps p so that its Sync and Run execute inside ns; Run
// does this for the engine Harness.New returns.
func InNamespace(p proxy.Provider, ns *Namespace) proxy.Provider { return netnstest.InNamespace(p, ns) }
