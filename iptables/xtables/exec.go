package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/internal/memfd"
	"github.com/svcproxy/svcproxy/internal/nfgen"
	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// Backends of the real Runner.
const (
	// BackendAuto uses the iptables, iptables-restore and iptables-save on
	// PATH, whichever backend they are.
	BackendAuto = ""
	BackendNFT  = "nft"
	// BackendLegacy is the x_tables (iptables-legacy) backend.
	BackendLegacy = "legacy"
)

// DefaultLockWait is how long a command waits for the xtables lock, as
// kube-proxy ("-w 5").
const DefaultLockWait = 5 * time.Second

// RunnerConfig configures the real Runner.
type RunnerConfig struct {
	// Family is v1.IPv4Protocol (iptables) or v1.IPv6Protocol (ip6tables);
	// "" means IPv4.
	Family v1.IPFamily
	// Backend is BackendNFT, BackendLegacy or BackendAuto.
	Backend string
	// LockWait bounds the wait for the xtables lock of each command (0:
	// DefaultLockWait; rounded up to whole seconds). Past it the command
	// fails with an error matching ErrLockHeld. The nft backend takes no
	// lock; iptables-save never waits for it.
	LockWait time.Duration
	// OnLockHeld, if set, is called each time a command gave up waiting
	// for the lock (with the tool's name), to count it.
	OnLockHeld func(tool string)
	// Logger; the zero value discards.
	Logger logr.Logger
	// LegacyTool makes Restore on the legacy backend always exec
	// iptables-legacy-restore. By default the process applies a Restore
	// input itself when it can encode every line of it (everything the
	// engines write): it reads each table from the kernel, applies the
	// input as iptables-legacy-restore --noflush would, and writes the
	// table back in one replace, holding the same xtables lock, leaving
	// the same tables (internal/xtblob). The tool still runs for any other
	// input, and every other command is still the iptables tool's.
	LegacyTool bool
	// OnHandedToTool, if set, is called each time the in-process path
	// leaves a Restore input to iptables-legacy-restore, with the reason:
	// HandedUnsupported or HandedRefused (the binary counts them in
	// svcproxy_fast_writer_handed_to_tool_total).
	OnHandedToTool func(reason string)
	// OnInProcessOff, if set, is called once when the in-process path is
	// switched off for the rest of the Runner's life, with the reason:
	// OffToolDisagreed or OffSelfCheck.
	OnInProcessOff func(reason string)
}

// Reasons passed to RunnerConfig.OnHandedToTool and OnInProcessOff, and
// counted in InProcessStats.
const (
	// HandedUnsupported: the input had a line the process does not
	// encode; nothing had been written, the tool applied all of it.
	HandedUnsupported = "unsupported"
	// HandedRefused: the kernel (or the process's own checks) refused the
	// process's write before any table was replaced; the tool applied
	// the same input.
	HandedRefused = "refused"
	// OffToolDisagreed: the tool took an input the process's write was
	// refused.
	OffToolDisagreed = "tool-accepted-refused-input"
	// OffSelfCheck: reading back what the process wrote (SelfCheck) did
	// not find what the input meant.
	OffSelfCheck = "self-check"
)

// execRunner is the real Runner: it execs the iptables tools.
type execRunner struct {
	family             v1.IPFamily
	cmd, restore, save string
	randomFully        bool
	// legacy: the tools are iptables-legacy (x_tables), whose tables
	// TableStamp can fingerprint.
	legacy bool
	// inProcess: Restore applies what it can encode itself (legacy only;
	// RunnerConfig.LegacyTool unset). It is turned off for good when the
	// tool accepted an input the process's write was refused.
	inProcess atomic.Bool
	// toolUnsupported and toolRefused count the inputs the in-process
	// path handed to the tool (HandedToTool); partial the refusals after
	// a table was already written, not replayed (InProcessStats).
	toolUnsupported, toolRefused, partial atomic.Uint64
	// selfChecks and selfCheckFailures count the read-backs (selfcheck.go).
	selfChecks, selfCheckFailures, selfCheckNanos atomic.Uint64
	// off is why the in-process path was switched off ("" while not).
	off atomic.Pointer[string]
	// checkNext: the next in-process Restore is read back (the first
	// one, and the one after CheckNextRestore).
	checkNext atomic.Bool
	// loggedUnsupported: the first hand-off for an unsupported input was
	// logged at info level; later ones at V(2).
	loggedUnsupported atomic.Bool
	onHanded, onOff   func(string)
	// listTable is iptables-save -t (the self-check; tests replace it).
	listTable func(ctx context.Context, table Table, buf *bytes.Buffer) error
	// keepPolicyCounters: the legacy tool is 1.8.10 or later
	// (xtblob.RestoreOptions.KeepPolicyCounters).
	keepPolicyCounters bool
	// writeTables is xtblob.Restore, verify xtblob.Verify (tests replace
	// them).
	writeTables func(xtblob.Family, []byte, xtblob.RestoreOptions) error
	verify      func(xtblob.Family, []byte, map[string][]byte, xtblob.RestoreOptions) error
	// wait are the lock-wait arguments of iptables and iptables-restore.
	wait       []string
	lockWait   time.Duration
	onLockHeld func(string)
	log        logr.Logger
}

// New returns the Runner that execs iptables-restore, iptables-save and
// iptables (ip6tables-… for IPv6) of the chosen backend. It probes the
// version once: it needs iptables 1.6.2 or later (iptables-restore --wait,
// MASQUERADE --random-fully).
func New(cfg RunnerConfig) (Runner, error) {
	fam := cfg.Family
	if fam == "" {
		fam = v1.IPv4Protocol
	}
	prefix := "iptables"
	switch fam {
	case v1.IPv4Protocol:
	case v1.IPv6Protocol:
		prefix = "ip6tables"
	default:
		return nil, fmt.Errorf("iptables: unknown IP family %q", fam)
	}
	switch cfg.Backend {
	case BackendAuto:
	case BackendNFT, BackendLegacy:
		prefix += "-" + cfg.Backend
	default:
		return nil, fmt.Errorf("iptables: unknown backend %q (want %q, %q or empty)", cfg.Backend, BackendNFT, BackendLegacy)
	}
	r := &execRunner{family: fam, log: cfg.Logger, onLockHeld: cfg.OnLockHeld, writeTables: xtblob.Restore,
		verify: xtblob.Verify, onHanded: cfg.OnHandedToTool, onOff: cfg.OnInProcessOff}
	r.listTable = r.SaveInto
	for _, b := range []struct {
		name string
		dst  *string
	}{{prefix, &r.cmd}, {prefix + "-restore", &r.restore}, {prefix + "-save", &r.save}} {
		path, err := exec.LookPath(b.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoBinary, b.name, err)
		}
		*b.dst = path
	}
	out, err := exec.Command(r.cmd, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("iptables: %s --version: %v: %s", r.cmd, err, bytes.TrimSpace(out))
	}
	maj, min, patch, ok := parseVersion(string(out))
	if !ok {
		return nil, fmt.Errorf("iptables: cannot parse version from %q", bytes.TrimSpace(out))
	}
	v := maj*10000 + min*100 + patch
	if v < 10602 {
		return nil, fmt.Errorf("iptables: version %d.%d.%d is too old (need 1.6.2 for iptables-restore --wait)", maj, min, patch)
	}
	r.randomFully = true
	r.legacy = !bytes.Contains(out, []byte("nf_tables")) // before 1.8 legacy was the only backend
	if r.legacy {
		// 1.8.10's libiptc keeps a built-in chain's policy counters
		// across a restore; the in-process writer does as the tool does.
		r.keepPolicyCounters = v >= 10810
		r.inProcess.Store(r.inProcessUsable(v, cfg.LegacyTool))
		r.checkNext.Store(true)
	}
	r.lockWait, r.wait = waitArgs(cfg.LockWait, v)
	return r, nil
}

// waitArgs returns the lock wait in force and the arguments that ask for
// it. Like kube-proxy, the tools are told to poll the lock every 100 ms
// ("-W 100000"); from 1.8.8 they wait on the lock itself and only warn
// about -W, so it is left out there.
func waitArgs(d time.Duration, version int) (time.Duration, []string) {
	if d <= 0 {
		d = DefaultLockWait
	}
	secs := int((d + time.Second - 1) / time.Second)
	args := []string{"-w", strconv.Itoa(secs)}
	if version < 10808 {
		args = append(args, "-W", "100000")
	}
	return time.Duration(secs) * time.Second, args
}

var versionRE = regexp.MustCompile(`v(\d+)\.(\d+)\.(\d+)`)

func parseVersion(s string) (maj, min, patch int, ok bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, 0, false
	}
	maj, _ = strconv.Atoi(m[1])
	min, _ = strconv.Atoi(m[2])
	patch, _ = strconv.Atoi(m[3])
	return maj, min, patch, true
}

// TableStamp implements Runner: the kernel's table info with the legacy
// backend (its size, entry count and hook offsets, as TableDigest reads
// them), folded into one value.
func (r *execRunner) TableStamp(table Table) (uint64, bool, error) {
	d, ok, err := r.TableDigest(table)
	if err != nil || !ok {
		return 0, false, err
	}
	return (d.Hash ^ uint64(d.Entries)) * 1099511628211, true, nil
}

// TableGeneration implements Runner: the nftables generation with the nft
// backend.
func (r *execRunner) TableGeneration() (uint32, bool, error) {
	if r.legacy {
		return 0, false, nil
	}
	g, err := nfgen.Generation()
	return g, err == nil, err
}

// TableDigest implements Runner: the kernel's table info with the legacy
// backend.
func (r *execRunner) TableDigest(table Table) (TableDigest, bool, error) {
	if !r.legacy {
		return TableDigest{}, false, nil
	}
	d, ok, err := nfgen.LegacyInfo(r.family == v1.IPv6Protocol, string(table))
	return TableDigest{Hash: d.Hash, Entries: d.Entries}, ok, err
}

// TableChainNames implements Runner: the chain names in the kernel's
// blob with the legacy backend (xtblob.ChainNames).
func (r *execRunner) TableChainNames(table Table) ([]string, bool, error) {
	if !r.legacy {
		return nil, false, nil
	}
	fam := xtblob.IPv4
	if r.family == v1.IPv6Protocol {
		fam = xtblob.IPv6
	}
	names, ok, err := xtblob.ChainNames(fam, string(table))
	if errors.Is(err, xtblob.ErrUnsupported) {
		return nil, false, nil
	}
	return names, ok, err
}

func (r *execRunner) Family() v1.IPFamily { return r.family }

// Capabilities implements Runner.
func (r *execRunner) Capabilities() Capabilities {
	c := Capabilities{Backend: BackendNFT, SaveAll: true}
	if r.legacy {
		c.Backend, c.InProcess = BackendLegacy, r.inProcess.Load()
	}
	return c
}

func (r *execRunner) HasRandomFully() bool { return r.randomFully }

// resourceProblem is the iptables tools' exit code for "could not get a
// resource", the xtables lock among them.
const resourceProblem = 4

// lockError returns a *LockError when a tool's failure was giving up on
// the xtables lock (exit code 4 and the lock named in its output), else
// nil. It counts the timeout.
func (r *execRunner) lockError(tool string, err error, out []byte) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != resourceProblem || !bytes.Contains(out, []byte("xtables lock")) {
		return nil
	}
	if r.onLockHeld != nil {
		r.onLockHeld(tool)
	}
	r.log.V(2).Info("Gave up waiting for the xtables lock", "tool", tool, "wait", r.lockWait)
	return &LockError{Tool: tool, Wait: r.lockWait, Output: string(bytes.TrimSpace(out)), Err: err}
}

// run execs the iptables command with args for table, returning its
// combined output and the exit code (-1 for failures to run at all).
func (r *execRunner) run(ctx context.Context, table Table, args ...string) ([]byte, int, error) {
	full := make([]string, 0, len(r.wait)+2+len(args))
	full = append(append(append(full, r.wait...), "-t", string(table)), args...)
	cmd := exec.CommandContext(ctx, r.cmd, full...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if le := r.lockError(toolName(r.cmd), err, out); le != nil {
			return out, resourceProblem, le
		}
		if ctx.Err() != nil {
			return out, -1, fmt.Errorf("%s %s: %w", r.cmd, strings.Join(full, " "), ctx.Err())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, ee.ExitCode(), fmt.Errorf("%s %s: %w: %s", r.cmd, strings.Join(full, " "), err, bytes.TrimSpace(out))
		}
		return out, -1, fmt.Errorf("%s %s: %w", r.cmd, strings.Join(full, " "), err)
	}
	return out, 0, nil
}

func toolName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

func (r *execRunner) ChainExists(ctx context.Context, table Table, chain Chain) (bool, error) {
	// Listing one rule (by number) of the chain succeeds iff the chain
	// exists, without printing a large chain.
	_, code, err := r.run(ctx, table, "-n", "-L", string(chain), "1")
	switch {
	case err == nil:
		return true, nil
	case code == 1:
		return false, nil
	}
	return false, err
}

func (r *execRunner) EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error) {
	ok, err := r.ChainExists(ctx, table, chain)
	if err != nil || ok {
		return ok, err
	}
	if _, _, err := r.run(ctx, table, "-N", string(chain)); err != nil {
		if errors.Is(err, ErrLockHeld) || ctx.Err() != nil {
			return false, err
		}
		// Lost a race with another writer?
		if ok, err2 := r.ChainExists(ctx, table, chain); err2 == nil && ok {
			return true, nil
		}
		return false, err
	}
	return false, nil
}

func (r *execRunner) FlushChain(ctx context.Context, table Table, chain Chain) error {
	_, _, err := r.run(ctx, table, "-F", string(chain))
	return err
}

func (r *execRunner) DeleteChain(ctx context.Context, table Table, chain Chain) error {
	_, _, err := r.run(ctx, table, "-X", string(chain))
	return err
}

func (r *execRunner) EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error) {
	_, code, err := r.run(ctx, table, append([]string{"-C", string(chain)}, args...)...)
	if err == nil {
		return true, nil
	}
	if code != 1 {
		return false, err
	}
	if _, _, err := r.run(ctx, table, append([]string{string(position), string(chain)}, args...)...); err != nil {
		return false, err
	}
	return false, nil
}

func (r *execRunner) DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error {
	_, code, err := r.run(ctx, table, append([]string{"-C", string(chain)}, args...)...)
	if err != nil {
		if code == 1 {
			return nil // missing (or the chain is): nothing to delete
		}
		if code == 2 && r.ruleCannotExist(ctx, table, args) {
			// iptables -C exits 2, not 1, when the rule's jump target
			// does not exist; then the rule cannot exist either, and the
			// contract is "no error when missing" (a cleanup on a clean
			// node must succeed).
			return nil
		}
		return err
	}
	_, _, err = r.run(ctx, table, append([]string{"-D", string(chain)}, args...)...)
	return err
}

// ruleCannotExist reports whether the user chain the rule jumps or goes to
// is missing from table. (A missing chain itself makes -C exit 1; a
// malformed rule exits 2 as well and stays an error.)
func (r *execRunner) ruleCannotExist(ctx context.Context, table Table, args []string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "-j" && args[i] != "--jump" && args[i] != "-g" && args[i] != "--goto" {
			continue
		}
		target := args[i+1]
		if strings.ToUpper(target) != target || !strings.HasPrefix(target, "KUBE-") {
			// Built-in targets (ACCEPT, DNAT, MASQUERADE, …) always
			// exist; only our own chains can be missing.
			return false
		}
		ok, err := r.ChainExists(ctx, table, Chain(target))
		return err == nil && !ok
	}
	return false
}

// SaveInto runs iptables-save, which takes no lock (it only reads); ctx
// bounds it.
func (r *execRunner) SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error {
	cmd := exec.CommandContext(ctx, r.save, "-t", string(table))
	var stderr bytes.Buffer
	cmd.Stdout = buf
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s -t %s: %w: %s", r.save, table, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// SaveAllInto implements Runner: one iptables-save of every table.
func (r *execRunner) SaveAllInto(ctx context.Context, buf *bytes.Buffer) error {
	cmd := exec.CommandContext(ctx, r.save)
	var stderr bytes.Buffer
	cmd.Stdout = buf
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s: %w: %s", r.save, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

var restoreLineRE = regexp.MustCompile(`line (\d+)`)

// inProcessVersion is the first iptables-legacy whose rules the process
// writes byte for byte as the tool would (the encoder was checked against
// 1.8.9; older tools may pick older match and target revisions, which
// their iptables-save might not print).
const inProcessVersion = 10809

// inProcessUsable reports whether Restore may apply inputs itself, and
// logs why not at info level (once, at New): the switch
// (RunnerConfig.LegacyTool, then fastpath.EnvLegacyInProcess) or the
// versions the path was verified with (fastpath.LegacyInProcess, unless
// the variable forces it on) and the hard requirements (iptables 1.8.9,
// whose rules the encoder writes byte for byte, and every match and target
// revision it writes in the kernel) say.
func (r *execRunner) inProcessUsable(version int, legacyTool bool) bool {
	if legacyTool {
		r.log.Info("Restoring with iptables-legacy-restore: switched off (RunnerConfig.LegacyTool, --iptables-legacy-restore-tool)")
		return false
	}
	if version < inProcessVersion {
		r.log.Info("Restoring with iptables-legacy-restore: it is older than 1.8.9, whose rules the process writes", "version", version)
		return false
	}
	override, bad := fastpath.EnvOverride(fastpath.EnvLegacyInProcess)
	if bad != "" {
		r.log.Info("Ignoring an unknown value of "+fastpath.EnvLegacyInProcess+" (want 0 or 1)", "value", bad)
	}
	tool := fastpath.Version{version / 10000, version / 100 % 100, version % 100}
	on, why := fastpath.Decide(fastpath.LegacyInProcess, tool, fastpath.KernelVersion(), override, fastpath.EnvLegacyInProcess)
	if !on {
		r.log.Info("Restoring with iptables-legacy-restore: " + why)
		return false
	}
	fam := xtblob.IPv4
	if r.family == v1.IPv6Protocol {
		fam = xtblob.IPv6
	}
	if err := xtblob.CheckKernelRevisions(fam); err != nil {
		r.log.Info("Restoring with iptables-legacy-restore: the kernel lacks a revision the process writes", "reason", err.Error())
		return false
	}
	r.log.Info("Restoring iptables-legacy tables from the process: " + why)
	return true
}

// switchOff turns the in-process path off for good, once, counting it.
func (r *execRunner) switchOff(reason string, err error, msg string) {
	if !r.inProcess.CompareAndSwap(true, false) {
		return
	}
	r.off.Store(&reason)
	r.log.Error(err, msg, "reason", reason)
	if r.onOff != nil {
		r.onOff(reason)
	}
}

// handed counts an input given to the tool.
func (r *execRunner) handed(reason string) {
	switch reason {
	case HandedUnsupported:
		r.toolUnsupported.Add(1)
	case HandedRefused:
		r.toolRefused.Add(1)
	}
	if r.onHanded != nil {
		r.onHanded(reason)
	}
}

// InProcessStats implements InProcessRestorer.
func (r *execRunner) InProcessStats() InProcessStats {
	s := InProcessStats{
		Active:            r.inProcess.Load(),
		Unsupported:       r.toolUnsupported.Load(),
		Refused:           r.toolRefused.Load(),
		Partial:           r.partial.Load(),
		SelfChecks:        r.selfChecks.Load(),
		SelfCheckFailures: r.selfCheckFailures.Load(),
		SelfCheckTime:     time.Duration(r.selfCheckNanos.Load()),
	}
	if p := r.off.Load(); p != nil {
		s.SwitchedOff = *p
	}
	return s
}

// RestoresInProcess implements InProcessRestorer.
func (r *execRunner) RestoresInProcess() bool { return r.inProcess.Load() }

// HandedToTool implements InProcessRestorer.
func (r *execRunner) HandedToTool() (unsupported, refused uint64) {
	return r.toolUnsupported.Load(), r.toolRefused.Load()
}

// Restore implements Runner: the in-process path reads the lines' kinds
// and chains from in.Ops (none: from in.Text); the tool, when it runs,
// reads in.Text.
func (r *execRunner) Restore(ctx context.Context, in RestoreInput) error {
	data, ops := in.Text, in.Ops
	if !r.inProcess.Load() {
		return r.restoreTool(ctx, data)
	}
	err := r.restoreInProcess(ctx, data, ops)
	switch {
	case err == nil:
		if r.checkNext.CompareAndSwap(true, false) {
			return r.selfCheck(ctx, data, ops)
		}
		return nil
	case errors.Is(err, xtblob.ErrUnsupported):
		// Nothing was written: the tool does it all.
		r.handed(HandedUnsupported)
		if r.loggedUnsupported.CompareAndSwap(false, true) {
			r.log.Info("Restoring with the iptables tool: the input has a line the process does not write (logged once; later ones at V(2))", "reason", err.Error())
		} else {
			r.log.V(2).Info("Restoring with the iptables tool: the input has a line the process does not write", "reason", err.Error())
		}
		return r.restoreTool(ctx, data)
	case errors.Is(err, ErrLockHeld) || ctx.Err() != nil:
		return err
	case errors.Is(err, xtblob.ErrPartial):
		// An earlier table of the input is already written: replaying
		// the input would apply it twice. The caller's next full sync
		// compares the tables with what it wants instead.
		r.partial.Add(1)
		r.log.Error(err, "The kernel refused a table after an earlier one of the same input was written; not replaying the input (the next full sync repairs the tables)")
		return err
	}
	// Refused: bad input (which the tool refuses too), or a write the
	// kernel did not take. The tool has the last word. If it refuses too,
	// the in-process error is returned when it names the line (the tool
	// often does not), the tool's otherwise; if it takes what the
	// process's write was refused, the two disagree and the tool does
	// every restore from now on.
	r.handed(HandedRefused)
	r.log.Info("The in-process restore was refused; running the iptables tool on the same input", "err", err.Error())
	if terr := r.restoreTool(ctx, data); terr != nil {
		var re *RestoreError
		if errors.As(err, &re) && re.Line > 0 && !errors.Is(terr, ErrLockHeld) && ctx.Err() == nil {
			return err
		}
		return terr
	}
	r.switchOff(OffToolDisagreed, err, "iptables-legacy-restore took an input the in-process restore was refused; restoring with the tool from now on")
	return nil
}

// restoreTool runs iptables-restore --noflush on data.
//
// The input is a file (a memfd), not a pipe: iptables 1.8.8 and later
// take the xtables lock with alarm(wait) and never cancel it, so
// SIGALRM arrives wait seconds after the lock was taken and interrupts a
// read of standard input that is waiting on a pipe; the tool's input loop
// ends there. Inside a table that fails the restore ("COMMIT expected");
// between two tables it exits 0 with the later tables never written (seen
// with iptables-legacy-restore 1.8.9 and -w 1, input stalled for 3 s; in the
// matrix's trixie guest, 1.8.11, a 3 MB input fed from a pipe failed after
// 28,086 lines). A file's reads are not interrupted.
func (r *execRunner) restoreTool(ctx context.Context, data []byte) error {
	args := append([]string{"--noflush"}, r.wait...)
	cmd := exec.CommandContext(ctx, r.restore, args...)
	if f, err := memfd.File("svcproxy-restore-input", data); err == nil {
		defer f.Close()
		cmd.Stdin = f
	} else {
		cmd.Stdin = bytes.NewReader(data)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		re := &RestoreError{Output: strings.TrimSpace(out.String()), Err: err}
		switch le := r.lockError(toolName(r.restore), err, out.Bytes()); {
		case le != nil:
			re.Err = le
		case ctx.Err() != nil:
			re.Err = ctx.Err()
		default:
			if m := restoreLineRE.FindStringSubmatch(re.Output); m != nil {
				re.Line, _ = strconv.Atoi(m[1])
				re.LineText = lineOf(data, re.Line)
			}
		}
		return re
	}
	return nil
}

// inProcessTool names the in-process restore in errors and lock counts.
const inProcessTool = "iptables-legacy-restore (in process)"

// restoreInProcess applies data (its lines typed by ops, when given) with
// xtblob.Restore, mapping its errors to
// the tool's: a *RestoreError naming the line, a *LockError inside it when
// the lock was held too long. An error matching xtblob.ErrUnsupported is
// returned as it is (nothing was written).
func (r *execRunner) restoreInProcess(ctx context.Context, data []byte, ops []RestoreOp) error {
	if err := ctx.Err(); err != nil {
		return &RestoreError{Output: inProcessTool + " not started", Err: err}
	}
	fam := xtblob.IPv4
	if r.family == v1.IPv6Protocol {
		fam = xtblob.IPv6
	}
	opts := xtblob.RestoreOptions{LockWait: r.lockWait, KeepPolicyCounters: r.keepPolicyCounters}
	if len(ops) > 0 {
		opts.Lines = xtblobLines(ops)
	}
	err := r.writeTables(fam, data, opts)
	if err == nil || errors.Is(err, xtblob.ErrUnsupported) {
		return err
	}
	re := &RestoreError{Output: err.Error(), Err: err}
	if errors.Is(err, xtblob.ErrPartial) {
		re.Err = &partialError{err}
		return re
	}
	if errors.Is(err, xtblob.ErrLockHeld) {
		if r.onLockHeld != nil {
			r.onLockHeld(inProcessTool)
		}
		r.log.V(2).Info("Gave up waiting for the xtables lock", "tool", inProcessTool, "wait", r.lockWait)
		re.Err = &LockError{Tool: inProcessTool, Wait: r.lockWait, Output: err.Error(), Err: err}
		return re
	}
	var xe *xtblob.RestoreError
	if errors.As(err, &xe) && xe.Line > 0 {
		re.Line, re.LineText = xe.Line, lineOf(data, xe.Line)
	}
	return re
}

// lineOf returns the 1-based line n of data, or "".
func lineOf(data []byte, n int) string {
	i := 0
	sc := lines.New(data)
	for sc.Scan() {
		if i++; i == n {
			return string(sc.Line())
		}
	}
	return ""
}
