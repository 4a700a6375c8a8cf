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
