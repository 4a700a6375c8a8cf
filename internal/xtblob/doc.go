// Package xtblob writes iptables-legacy (x_tables) tables from the process
// itself, without iptables-legacy-restore.
//
// iptables-legacy-restore spends most of a large restore in user space:
// libxtables looks every chain name up in a 512-bucket list of strings
// (once to announce it, once for every rule that jumps to it) and libiptc
// rebuilds its chain index every 355 new chains: most of a large cold
// start's time (BENCHMARKS.md's changelog has the profile). The kernel
// itself only wants one blob per table
// (IPT_SO_SET_REPLACE), which Go can lay out in a fraction of that.
//
// The package has two halves:
//   - Encoder turns one rule of an iptables-restore input ("-A CHAIN" and
//     what follows) into the entry iptables-legacy would build for it
//     (struct ipt_entry or ip6t_entry with its matches and target), for the
//     vocabulary svcproxy's engines write. Anything else is ErrUnsupported.
//   - Restore reads a table from the kernel, applies an iptables-restore
//     --noflush input to it as iptables-legacy-restore would, and writes it
//     back in one replace, keeping every other chain and rule (and their
//     counters) as they were. A writer that typed the input's lines as it
//     rendered them (RestoreOptions.Lines: the iptables engine, through
//     the xtables Runner's Restore of a RestoreInput with Ops) spares
//     Restore and Verify splitting the declarations and -A lines back out
//     of the text; the
//     text stays the authority (a line its type does not describe exactly
//     is parsed), and the rules' matches are still read from it by the
//     Encoder.
//
// A caller falls back to the iptables tools on ErrUnsupported: nothing has
// been written then.
//
// # What Restore guarantees
//
// The tables it writes read back (IPT_SO_GET_ENTRIES) byte for byte as
// they do after iptables-legacy-restore --noflush of the same input, and
// iptables-legacy-save prints them the same: chains in libiptc's order
// (built-in chains in hook order, then user chains sorted by name), every
// user chain an ERROR head, its rules and a RETURN, the table's final
// ERROR entry, jumps to the first rule of their chain, rules without a
// target falling through to the next entry. Counters follow libiptc's
// TC_COMMIT: a rule read from the kernel keeps its counters, a new rule
// starts at zero, a built-in chain's policy keeps only what it counted
// since it was read (libiptc up to 1.8.9 zeroes policy counters on every
// commit; with RestoreOptions.KeepPolicyCounters it keeps them all, as
// 1.8.10 and later do), and zero for a policy the input sets. The kernel tests check this against
// the tool for both families: foreign chains and rules, gotos, counters,
// the iptables engine's golden payloads and its 1,000-service cold start,
// second payloads that redeclare and delete chains, -N/-I/-D/-R/-F/-P
// partial inputs, the tool's errors, and a table changed underneath.
//
// Unlike the tool, which commits each table at its COMMIT, Restore parses,
// encodes and applies the whole input before it writes any table: an
// error for a line (*RestoreError, naming the line and table) means
// nothing was written. Only the kernel refusing a table (a loop of jumps,
// a missing extension) can fail after earlier tables were written; that
// error is a *PartialError naming the tables written (errors.Is
// ErrPartial), and the input must not be replayed (its first tables
// would be applied twice): the caller compares the tables with what it
// wants instead.
//
// # Reading back
//
// Verify checks, after a write, that the kernel holds what an input
// wrote: every user chain the input declares is read from the kernel and
// compared entry by entry (counters aside) with the input's rules for it
// and with iptables-legacy-save's listing of it, both encoded as Restore
// encodes. The first finds a table changed behind the writer; the second
// a rule the tool reads otherwise than the process meant it. What
// iptables itself does not round-trip (recent's IPv4 mask, listed as
// "--mask 255.255.255.255") is left out of the second. Chains changed
// line by line (-I, -D in a chain the input does not declare) and
// built-in chains are not checked.
//
// The lines Restore takes are those of the engines' inputs: "*table",
// "COMMIT", comments, ":CHAIN POLICY [p:b]" (the counters are ignored, as
// without --counters), -A, -I [n], -D (by rule or number), -R n,
// -F [CHAIN], -N, -X [CHAIN] and -P, with the rules Encoder encodes; the
// rest (-E, -Z, -C, a line the tool would split, a quoted chain name) is
// ErrUnsupported.
//
// # The lock
//
// Restore holds the xtables lock, flock(2) on RestoreOptions.LockFile,
// $XTABLES_LOCKFILE or /run/xtables.lock as iptables 1.8.9 takes it, from
// its first read to its last write, polling for it at most
// RestoreOptions.LockWait; past that it fails with ErrLockHeld and has
// written nothing.
//
// A writer that ignores the lock is caught only partly. The kernel
// refuses a replace (EAGAIN) only when the table's entry count is not the
// one the writer read (IPT_SO_SET_REPLACE compares num_counters with the
// table's number of entries); then Restore reads that table and applies
// its input again, up to three times. A change between Restore's read and
// its replace that keeps the entry count (a rule replaced by another, a
// chain deleted and as many entries added elsewhere) is not detected:
// Restore's replace overwrites it. Likewise the other writer's own stale
// replace after Restore's succeeds whenever Restore left the entry count
// as that writer read it, and puts back what Restore changed (a chain it
// deleted, say). The engines' full resyncs list the tables and remove
// the chains of theirs that nothing wants (iptables' and nftables' doc),
// so what such a writer put back lasts until the next full resync at
// most.
//
// # Cost
//
// BenchmarkKernelRestore and BenchmarkRestoreUserSpace (BENCHMARKS.md) set
// Restore against iptables-legacy-restore on the iptables engine's cold
// start (33 MB of input, 545,000 nat entries, a 107 MB blob): rules are
// encoded on GOMAXPROCS goroutines, the blob written by as many, and the
// kernel's replace is the larger part. A small input over that table (a
// partial sync, BenchmarkKernelRestorePartial) costs what the kernel
// charges to copy the table out and in again, as it does the tool;
// Restore's own part is a small share of it. The blob, the encoded rules
// and the table read from the kernel live in anonymous mappings outside
// the Go heap, unmapped before Restore returns.
package xtblob
