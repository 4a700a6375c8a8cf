package iptables

import (
	"bytes"
	"context"

	v1 "k8s.io/api/core/v1"
)

// Table is an iptables table name.
type Table string

// Chain is an iptables chain name.
type Chain string

// The tables this package writes.
const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
)

// Built-in chains we hook into.
const (
	ChainPrerouting  Chain = "PREROUTING"
	ChainInput       Chain = "INPUT"
	ChainForward     Chain = "FORWARD"
	ChainOutput      Chain = "OUTPUT"
	ChainPostrouting Chain = "POSTROUTING"
)

// RulePosition says where EnsureRule puts a missing rule.
type RulePosition string

const (
	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// Runner is what the iptables engine (and the ipvs and userspace engines,
// for their small rulesets) drive. It is one IP family's iptables.
// The real implementation execs iptables / iptables-restore / iptables-save
// (nft or legacy backend); iptablestest.Fake keeps the state in memory.
type Runner interface {
	// Family is v1.IPv4Protocol or v1.IPv6Protocol.
	Family() v1.IPFamily
	// EnsureChain creates chain in table unless it exists; it reports
	// whether it existed.
	EnsureChain(ctx context.Context, table Table, chain Chain) (existed bool, err error)
	// FlushChain empties a chain.
	FlushChain(ctx context.Context, table Table, chain Chain) error
	// DeleteChain deletes an (empty, unreferenced) chain.
	DeleteChain(ctx context.Context, table Table, chain Chain) error
	// ChainExists reports whether chain exists in table.
	ChainExists(ctx context.Context, table Table, chain Chain) (bool, error)
	// EnsureRule adds the rule (args as for iptables -A after the chain
	// name) at position unless an identical rule exists; it reports whether it existed.
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (existed bool, err error)
	// DeleteRule deletes the rule if it exists (no error when missing).
	DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error
	// Restore runs iptables-restore --noflush (waiting for the xtables
	// lock) on data, which may hold several tables ("*nat ... COMMIT").
	Restore(ctx context.Context, data []byte) error
	// SaveInto appends iptables-save output of table to buf.
	SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error
	// HasRandomFully reports whether MASQUERADE --random-fully is supported.
	HasRandomFully() bool
}
