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
// iptables/xtables/xtablestest.Fake.
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
//     bounded wait and keeping every other chain, rule and counter.
//     An input whose lines its writer typed (RestoreInput.Ops: the
//     iptables engine's payloads) is applied the same way: the process
//     takes each chain declaration and -A line's chain and rule from the
//     ops rather than splitting the text, and reads every other line, and
//     any line whose op does not describe it, from the text; the result,
//     the self-check and the fallbacks below are those of the text alone,
//     and the tool, when it runs, gets the text. Input
//     with a line it does not encode (anything beyond what the engines
//     write) goes to the tool whole, with nothing written before; so does
//     everything when RunnerConfig.LegacyTool is set, with iptables
//     older than 1.8.9 (whose rules the encoder was checked against), or
//     on a kernel without a match or target revision it writes (New
//     asks the kernel once). BenchmarkKernelColdStart (BENCHMARKS.md)
//     measures what this saves on a legacy cold start.
//   - The in-process path is on by default only for the iptables and
//     kernel versions it was verified with (internal/fastpath: today
//     iptables-legacy 1.8.9 to 1.8.11 on kernels from 6.1); New logs one
//     line at info level saying which restores and why. The environment
//     variable SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0 turns it off, =1 on
//     outside those versions (iptables 1.8.9 and the kernel's revisions
//     are still required); RunnerConfig.LegacyTool turns it off whatever
//     the variable says.
//   - Its fallbacks: an input with a line it does not encode goes to the
//     tool whole (logged at info level once); a write the kernel refuses
//     before any table was replaced is run through the tool, and when the
//     tool takes it the path is off for the Runner's life (logged at
//     error level); a refusal after an earlier table of the input was
//     replaced is not replayed (ErrPartialRestore: the engine's next sync,
//     a full one, compares the tables with what it wants).
//   - Its self-check: the first Restore it writes, and the first after
//     each Runner.CheckNextRestore (every engine calls it at the start
//     of a full sync), is read back: each chain the input declares,
//     from the kernel and as iptables-legacy-save lists it, must be the
//     input's rules entry for entry (xtblob.Verify). A difference turns the path off,
//     is logged at error level and fails the Restore with ErrSelfCheck.
//   - InProcessRestorer.InProcessStats (diagnostics; engines read
//     Capabilities.InProcess) says whether the path is on, why it was
//     switched off, and counts the hand-offs and read-backs;
//     RunnerConfig.OnHandedToTool and OnInProcessOff let a binary count
//     them (minimal-proxy: kubeproxy_fast_writer_* metrics).
//   - Capabilities says which backend it drives and whether Restore
//     writes in process; with the legacy backend TableStamp and
//     TableDigest fingerprint a table from the kernel in microseconds,
//     where any iptables command parses the whole table (drift checks and
//     resyncs use them); with the nft backend TableGeneration reads the
//     ruleset generation.
package xtables
