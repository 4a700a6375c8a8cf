// Package xtables is the iptables command layer every engine that writes
// iptables rules shares (iptables, ipvs, userspace, and the engines to
// come): the Runner interface to one IP family's iptables and its real
// implementation (New: the iptables, iptables-save and iptables-restore
// tools of the nft or legacy backend), the typed errors, the Table and
// Chain names, the jump rules that hook an engine's chains into the
// built-in ones (JumpRule, EnsureJumpRules, DeleteJumpRules), and the
// iptables match of proxy.LocalDetector (LocalMatch).
//
// It is a leaf: it imports no engine, so an engine needs only this package
// to drive iptables. Its in-memory fake, with a packet tracer, is
// iptables/iptablestest.Fake.
//
// Guarantees of the real Runner:
//   - Bounded waits: every iptables and iptables-restore command waits for
//     the xtables lock at most RunnerConfig.LockWait (5 s, as kube-proxy),
//     then fails with an error matching ErrLockHeld (a *LockError, inside
//     a *RestoreError for Restore), counted through
//     RunnerConfig.OnLockHeld. Nothing here retries: the engine's sync
//     fails and its loop retries with backoff. iptables-save takes no
//     lock; the nft backend takes none at all.
//   - Every command ends when its context does (the process is killed;
//     an iptables-restore commit is atomic per table either way).
//   - A failed iptables-restore is a *RestoreError (errors.Is ErrRestore)
//     carrying the input line the tool named, when it named one.
//   - DeleteRule of a missing rule, or of a rule whose target chain is
//     missing, is no error.
//   - With the legacy backend Restore writes the tables from the process
//     (internal/xtblob): it reads each table from the kernel, applies the
//     input as iptables-legacy-restore --noflush would, and replaces the
//     table in one call, holding the same xtables lock with the same
//     bounded wait and keeping every other chain, rule and counter. Input
//     with a line it does not encode (anything beyond what the engines
//     write) goes to the tool whole, with nothing written before; so does
//     everything when RunnerConfig.LegacyTool is set, with iptables
//     older than 1.8.9 (whose rules the encoder was checked against), or
//     on a kernel without a match or target revision it writes (New
//     asks the kernel once). BenchmarkKernelColdStart (BENCHMARKS.md)
//     measures what this saves on a legacy cold start.
//   - Capabilities says which backend it drives and whether Restore
//     writes in process; with the legacy backend TableStamp and
//     TableDigest fingerprint a table from the kernel in microseconds,
//     where any iptables command parses the whole table (drift checks and
//     resyncs use them); with the nft backend TableGeneration reads the
//     ruleset generation.
package xtables
