package iptables

import (
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// The iptables command layer lives in package iptables/xtables, which the
// other engines share. These names are this engine's vocabulary for it.
type (
	Table  = xtables.Table
	Chain  = xtables.Chain
	Runner = xtables.Runner
)

// The tables and built-in chains (see package xtables).
const (
	TableNAT    = xtables.TableNAT
	TableFilter = xtables.TableFilter
	TableMangle = xtables.TableMangle

	ChainPrerouting  = xtables.ChainPrerouting
	ChainInput       = xtables.ChainInput
	ChainForward     = xtables.ChainForward
	ChainOutput      = xtables.ChainOutput
	ChainPostrouting = xtables.ChainPostrouting
)

// Transitional: the ipvs and userspace engines, and their tests, still
// name these through this package while they move to package xtables.
// They go once nothing outside this package uses them.
type (
	// Deprecated: use xtables.RunnerConfig.
	RunnerConfig = xtables.RunnerConfig
	// Deprecated: use xtables.RulePosition.
	RulePosition = xtables.RulePosition
)

// Deprecated: transitional aliases of package xtables' names.
const (
	Prepend       = xtables.Prepend
	Append        = xtables.Append
	BackendAuto   = xtables.BackendAuto
	BackendNFT    = xtables.BackendNFT
	BackendLegacy = xtables.BackendLegacy
)

// Deprecated: use xtables.ErrNoBinary.
var ErrNoBinary = xtables.ErrNoBinary

// New returns the real Runner.
//
// Deprecated: use xtables.New.
func New(cfg RunnerConfig) (Runner, error) { return xtables.New(cfg) }
