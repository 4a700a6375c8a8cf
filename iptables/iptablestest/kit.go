package iptablestest

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
)

// Fakes is everything an iptables Proxier drives, in memory: the kit's
// bundle, the same shape in every …test package.
type Fakes struct {
	// IPTables is the one IP family's iptables.
	IPTables *Fake
	// Sysctl is the node's /proc/sys (route_localnet, which the engine
	// sets for Config.LocalhostNodePorts and the Tracer obeys).
	Sysctl *Sysctl
}

// NewFakes returns empty fakes for family (v1.IPv6Protocol; anything else
// means IPv4).
func NewFakes(family v1.IPFamily) *Fakes {
	return &Fakes{IPTables: NewFake(family), Sysctl: NewSysctl(nil)}
}

// Interfaces returns the fakes as an iptables.Proxier's Interfaces.
func (f *Fakes) Interfaces() iptables.Interfaces {
	ifs := iptables.Interfaces{IPTables: f.IPTables}
	if f.Sysctl != nil {
		ifs.Sysctl = f.Sysctl
	}
	return ifs
}

// Dump returns the iptables fake's state as text (iptables-save format;
// see Fake.Dump). Sysctl.Dump has the sysctls.
func (f *Fakes) Dump() string { return f.IPTables.Dump() }

// NewTracer returns a Tracer over the fakes' iptables for a node described
// by cfg (the kit's constructor shape, the same in every …test package),
// reading route_localnet from the fakes' Sysctl unless cfg.Sysctl is set.
//
// It also accepts a bare *Fake (route_localnet then as cfg.Sysctl says,
// on without one), as xtablestest.NewTracer does.
func NewTracer[F *Fakes | *Fake](f F, cfg TracerConfig) *Tracer {
	switch f := any(f).(type) {
	case *Fakes:
		if cfg.Sysctl == nil {
			cfg.Sysctl = f.Sysctl
		}
		return xtablestest.NewTracer(f.IPTables, cfg)
	case *Fake:
		return xtablestest.NewTracer(f, cfg)
	}
	panic("unreachable")
}

// NewSysctl returns a fake /proc/sys holding the kernel's default for the
// one setting the engine uses (iptables.SysctlRouteLocalnet = 0), then
// values (may be nil). Reading any other name never written fails with an
// error wrapping fs.ErrNotExist.
// (xtablestest.NewSysctl: xtablestest.RouteLocalnet is the engine's name.)
func NewSysctl(values map[string]int) *Sysctl { return xtablestest.NewSysctl(values) }

// The iptables fake and its tracer live in xtablestest, the driver's test
// kit (which the ipvs and userspace kits use without this engine); these
// names forward to it so tests written against this kit keep compiling.
type (
	Fake           = xtablestest.Fake
	Sysctl         = xtablestest.Sysctl
	Stats          = xtablestest.Stats
	Tracer         = xtablestest.Tracer
	TracerConfig   = xtablestest.TracerConfig
	Route          = xtablestest.Route
	Mark           = xtablestest.Mark
	IPSetQuery     = xtablestest.IPSetQuery
	Path           = xtablestest.Path
	Trace          = xtablestest.Trace
	AmbiguousError = xtablestest.AmbiguousError
)

// NewFake is xtablestest.NewFake.
func NewFake(family v1.IPFamily) *Fake { return xtablestest.NewFake(family) }

// NewFakeFromDump is xtablestest.NewFakeFromDump.
func NewFakeFromDump(family v1.IPFamily, text string) (*Fake, error) {
	return xtablestest.NewFakeFromDump(family, text)
}

// TracerConfigFor is xtablestest.TracerConfigFor.
var TracerConfigFor = xtablestest.TracerConfigFor

// Errors of the Fake and the Tracer (xtablestest's).
var (
	ErrUnknownTable  = xtablestest.ErrUnknownTable
	ErrNoSuchChain   = xtablestest.ErrNoSuchChain
	ErrChainExists   = xtablestest.ErrChainExists
	ErrChainInUse    = xtablestest.ErrChainInUse
	ErrChainNotEmpty = xtablestest.ErrChainNotEmpty
	ErrBuiltinChain  = xtablestest.ErrBuiltinChain
	ErrNoSuchRule    = xtablestest.ErrNoSuchRule
	ErrBadRule       = xtablestest.ErrBadRule
	ErrLoop          = xtablestest.ErrLoop
	ErrUnsupported   = xtablestest.ErrUnsupported
	ErrTraceTooLarge = xtablestest.ErrTraceTooLarge
)
