package xtables

import (
	"bytes"
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// Table is an iptables table name.
type Table string

// Chain is an iptables chain name.
type Chain string

// The tables the engines write.
const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
)

// Built-in chains the engines hook into.
const (
	ChainPrerouting  Chain = "PREROUTING"
	ChainInput       Chain = "INPUT"
	ChainForward     Chain = "FORWARD"
	ChainOutput      Chain = "OUTPUT"
	ChainPostrouting Chain = "POSTROUTING"
)

// Chains that more than one engine writes, named as kube-proxy names them
// in every mode, so that moving a node between modes (or between
// kube-proxy and svcproxy) leaves no duplicate rules behind.
const (
	ChainKubeServices    Chain = "KUBE-SERVICES"
	ChainKubePostrouting Chain = "KUBE-POSTROUTING"
	ChainKubeMarkMasq    Chain = "KUBE-MARK-MASQ"
	ChainKubeForward     Chain = "KUBE-FORWARD"
	// ChainKubeProxyFirewall holds the load-balancer source-range rules
	// (iptables and ipvs modes).
	ChainKubeProxyFirewall Chain = "KUBE-PROXY-FIREWALL"
	// ChainKubeProxyCanary is created empty in the tables an engine owns
	// rules in; its disappearance means someone flushed them behind our
	// back (see the engines' drift checks).
	ChainKubeProxyCanary Chain = "KUBE-PROXY-CANARY"
	// ChainKubeletCanary belongs to the kubelet; no engine touches it.
	ChainKubeletCanary Chain = "KUBE-KUBELET-CANARY"
)

// RulePosition says where EnsureRule puts a missing rule.
type RulePosition string

// The positions of EnsureRule.
const (
	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// Runner is one IP family's iptables, as the engines drive it: a few
// single-rule commands for the rules that hook our chains into the
// built-in ones, iptables-save listings and iptables-restore --noflush
// transactions for everything else. New returns the real one (exec of the
// iptables tools, nft or legacy backend); iptables/xtables/xtablestest.Fake keeps
// the state in memory and can trace packets through it.
//
// Every call that needs the xtables lock waits for it a bounded time
// (RunnerConfig.LockWait) and then fails with an error matching
// ErrLockHeld; every call ends when ctx does.
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
	// name) at position unless an identical rule exists; it reports
	// whether it existed.
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (existed bool, err error)
	// DeleteRule deletes the rule if it exists (no error when missing).
	DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error
	// Restore runs iptables-restore --noflush on in.Text, which may hold
	// several tables ("*nat ... COMMIT"). A table whose input fails
	// changes nothing; the error is a *RestoreError. in.Ops, when the
	// writer typed the lines (the iptables engine's payloads), lets the
	// legacy backend's in-process writer read the lines' kinds and chains
	// instead of parsing the text back; the tools, and a Runner that
	// keeps no kernel, read in.Text. A caller with plain text passes
	// RestoreInput{Text: data}. It is the one way every engine writes
	// tables in a transaction: a wrapper that overrides Restore (to log,
	// count or time it) sees every restore.
	Restore(ctx context.Context, in RestoreInput) error
	// SaveInto appends iptables-save output of table to buf.
	SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error
	// HasRandomFully reports whether MASQUERADE --random-fully is supported.
	//
	// Deprecated: the engines no longer ask. As kube-proxy v1.37 (which
	// dropped the method from its interface), they always write
	// --random-fully; New requires iptables 1.6.2, which has it. Kept so
	// that existing Runner implementations still satisfy the interface.
	HasRandomFully() bool

	// Capabilities says what the Runner is beyond these commands (see
	// Capabilities). A wrapper forwards it, as it forwards every method.
	Capabilities() Capabilities
	// SaveAllInto appends the iptables-save output of every table to buf,
	// in one listing; without Capabilities().SaveAll it returns an error
	// matching errors.ErrUnsupported.
	SaveAllInto(ctx context.Context, buf *bytes.Buffer) error
	// TableStamp returns a value that changes whenever table's chains or
	// rules change (not their counters), without listing the table; ok is
	// false when there is none. With the legacy backend any iptables
	// command (iptables -L of one empty chain included) copies and parses
	// the whole table (BenchmarkKernelDriftCheck in BENCHMARKS.md), while
	// the kernel reports each table's size, entry count and hook offsets
	// in microseconds; drift checks use the stamp to skip the command while
	// a table is unchanged since it was last verified. The real Runner
	// answers ok=false with the nft backend (where checking a chain is
	// cheap), off Linux, and for a table the kernel has not loaded.
	TableStamp(table Table) (stamp uint64, ok bool, err error)
	// TableGeneration returns the nftables ruleset generation id, which
	// every commit in the network namespace moves; ok is false when the
	// Runner's tables are not nftables ones.
	TableGeneration() (gen uint32, ok bool, err error)
	// TableDigest fingerprints table without listing it (see TableDigest);
	// ok is false when there is none (the nft backend: see
	// TableGeneration).
	TableDigest(table Table) (d TableDigest, ok bool, err error)
	// TableChainNames lists table's chains (built-in and user-defined) as
	// the kernel holds them, copying the table out without the lock and
	// without parsing rules; ok is false when there is no such reader
	// (the nft backend, a Runner that writes no kernel) or no table. With
	// the legacy backend a resync that TableDigest finds unchanged still
	// compares these names with the chains it wrote: a stale copy written
	// back by a writer that ignores the lock keeps the table's size and
	// entry count, not its chain names.
	TableChainNames(table Table) (names []string, ok bool, err error)
	// CheckNextRestore asks the Runner to read back what its next Restore
	// writes and compare it with the input (the in-process writer's
	// self-check; see the package doc); every engine calls it at the start
	// of a full sync. A Runner that writes through the tools, or no kernel,
	// does nothing.
	CheckNextRestore()
}

// SectionsWithCommands counts the table sections of an iptables-restore
// input that hold at least one line: iptables-nft-restore commits each
// such section as a transaction of its own (one step of the nftables
// ruleset generation), and an empty one not at all.
func SectionsWithCommands(data []byte) int {
	n := 0
	in, any := false, false
	sc := lines.New(data)
	for sc.Scan() {
		line := sc.Line()
		switch {
		case len(line) == 0 || line[0] == '#':
		case line[0] == '*':
			in, any = true, false
		case bytes.Equal(line, []byte("COMMIT")):
			if in && any {
				n++
			}
			in = false
		default:
			any = true
		}
	}
	return n
}
