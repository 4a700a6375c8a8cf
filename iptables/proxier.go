package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/go-logr/logr"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Proxier is the iptables engine for one IP family, built on the engine
// base: the base records Service, EndpointSlice and Node events, runs the
// loop and decides full or partial; the Proxier plans, diffs and applies
// the rules of each sync (the hooks below). Its exported methods are the
// base's. For dual stack, combine two with proxy.NewDualStack.
type Proxier struct {
	*engine.Base

	cfg Config
	ipt xtables.Runner
	log logr.Logger
	// sysctl sets route_localnet when localhost node ports are served
	// (r.env.localhostNodePorts).
	sysctl Sysctl

	// Guarded by the base: the hooks never run concurrently.
	r    renderer
	save bytes.Buffer
	// wrote is set once a full sync succeeded (the canaries exist).
	wrote bool
	// chunk is the most new nat chains one restore of a full sync creates
	// (0: no limit); per backend (chunk.go).
	chunk int
	// saveAll: full syncs list every table in one iptables-save
	// (iptables-nft, where that costs what listing nat alone does).
	saveAll bool
	// kernel digests the nat and filter chains of the listings a full sync
	// just read (transient): the full payload is reduced to the chains
	// whose content differs (chaindiff.go).
	kernel map[xtables.Table]tableSums
	// stamps are the Runner.TableStamp stamps of the tables as last
	// written or verified to hold the canary (none: check with a command).
	stamps map[xtables.Table]uint64
	// resync proves the tables unchanged since our last write, so a full
	// resync may skip the listing (resync.go).
	resync resyncState
	// diff is the chain compare's state across syncs (chaindiff.go).
	diff chainDiffer
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier returns a Proxier driving ifs.IPTables. Nothing touches the
// node until the first Sync (or Run) after both initial lists are synced.
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	if ifs.IPTables == nil {
		return nil, errors.New("iptables: Interfaces.IPTables is nil")
	}
	cfg, err := cfg.withDefaults(ifs.IPTables.Family())
	if err != nil {
		return nil, err
	}
	p := &Proxier{cfg: cfg, ipt: ifs.IPTables, log: cfg.Logger.WithValues("ipFamily", cfg.IPFamily), sysctl: ifs.Sysctl, diff: newChainDiffer()}
	if p.sysctl == nil {
		p.sysctl = NewSysctl()
	}
	p.r.env = newPlanEnv(&cfg)
	noteLocalhostNodePorts(&cfg, p.r.env.localhostNodePorts, p.log)
	p.r.mark = p.r.env.masqMark
	switch caps := ifs.IPTables.Capabilities(); caps.Backend {
	case xtables.BackendNFT:
		p.chunk = chunkChains
		p.saveAll = caps.SaveAll
	case xtables.BackendLegacy:
		p.chunk = legacyChunkChains
		if caps.InProcess {
			// Each chunk would read and replace the whole table.
			p.chunk = 0
		}
	}
	p.Base, err = engine.New(cfg.Common, engine.Hooks{
		Name:            "iptables",
		Apply:           p.apply,
		DryRun:          p.dryRun,
		Drifted:         p.drifted,
		Unchanged:       p.lastWriteHolds,
		Cleanup:         p.cleanup,
		MakeServicePort: makeServicePort,
		MakeEndpoint:    makeEndpoint,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func newPlanEnv(cfg *Config) planEnv {
	return planEnv{
		nodeName:      cfg.NodeName,
		nodeIP:        cfg.NodeIP(),
		masqueradeAll: cfg.MasqueradeAll,
		ifLocal:       xtables.LocalMatch(cfg.LocalDetector, false),
		ifNotLocal:    xtables.LocalMatch(cfg.LocalDetector, true),
		masqMark:      fmt.Sprintf("%#x", 1<<uint(cfg.MasqueradeBit)),

		localhostNodePorts: servesLocalhostNodePorts(cfg),
	}
}

// apply is the Apply hook: a full sync ensures the base chains, jump rules
// and canaries and rewrites every service (deleting the per-service chains
// the kernel lists and no service wants); a partial one writes only the
// services that changed. Either is one iptables-restore.
func (p *Proxier) apply(ctx context.Context, req *engine.Request) (engine.Result, error) {
	u := req.Update
	p.r.env.nodeLabels = u.NodeLabels
	full := req.Full
	var res engine.Result
	// Large clusters get terse rules (as kube-proxy above 1,000
	// endpoints); the switch needs every service rewritten.
	if terse := countEndpoints(u.Endpoints) > largeClusterEndpoints; terse != p.r.env.terse {
		p.r.env.terse = terse
		if !full {
			full, res.Full = true, true
		}
	}
	var payload restorePayload
	if full {
		if p.r.env.localhostNodePorts {
			if err := ensureRouteLocalnet(p.sysctl); err != nil {
				return engine.Result{}, err
			}
		}
		p.r.setTail(p.cfg.IPFamily, p.cfg.NodePortAddresses, p.localAddresses())
		p.r.randomFull = true // always, as kube-proxy v1.37 (see doc.go)
		early := p.renderEarly(u)
		existing, err := p.ensureBaseOrSkip(ctx, req)
		var usedEarly bool
		payload, usedEarly = early.wait(existing)
		if err != nil {
			p.r.discard()
			p.r.releaseLarge()
			return engine.Result{}, fmt.Errorf("ensure chains: %w", err)
		}
		if !usedEarly {
			payload = p.r.renderFull(u.Services, u.Endpoints, existing)
		}
		// On a node without service chains nothing of note can be
		// skipped: save the compare (BenchmarkKernelColdStart).
		if p.kernel != nil && hasServiceChain(p.kernel[xtables.TableNAT]) {
			var written, skipped int
			var hints []declHint
			if !usedEarly && existing != nil && p.kernel[xtables.TableNAT] != nil {
				hints = p.r.declHints // the render's, over the same digests
			}
			payload, written, skipped = reducePayload(payload, p.kernel, &p.diff, hints)
			p.kernel = nil
			p.log.V(2).Info("Full sync: writing only the chains that differ from the kernel's", "written", written, "unchanged", skipped)
		}
		p.kernel = nil
	} else {
		payload = p.r.renderPartial(u.Services, u.Endpoints, u.ChangedServices, u.ServicePorts)
	}
	if checkOps {
		if m := opsMismatch(payload); m != "" {
			panic("iptables: the payload's ops are not its text's: " + m)
		}
	}
	var before map[xtables.Table]uint64
	if !full && !payload.empty() {
		before = p.tableStamps()
	}
	if !payload.empty() {
		if full {
			// The in-process writer reads back what this sync writes.
			p.ipt.CheckNextRestore()
		}
		if err := p.restoreTracked(ctx, payload, full); err != nil {
			p.r.discard()
			p.r.releaseLarge()
			p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
			if !full {
				p.cfg.Metrics.IncIPTablesPartialRestoreFailures(p.cfg.IPFamily)
			}
			return engine.Result{}, fmt.Errorf("restore: %w", err)
		}
		res.Writes = len(payload.ops)
	}
	p.r.commit()
	p.r.releaseLarge()
	if full {
		p.wrote = true
	}
	if full || !payload.empty() {
		p.recordStamps(full, before)
	}
	m, fam := p.cfg.Metrics, p.cfg.IPFamily
	m.SetIPTablesRulesLastSync(fam, string(xtables.TableNAT), p.r.natLines)
	m.SetIPTablesRulesLastSync(fam, string(xtables.TableFilter), p.r.filterLines)
	p.log.V(4).Info("Restored iptables rules", "full", full, "lines", p.r.out.lines, "bytes", len(payload.text))
	return res, nil
}

// restore applies a payload: one iptables-restore, its lines typed
// (RestoreInput.Ops: the in-process writer reads the ops instead of
// parsing the text), or for a full payload that creates more than p.chunk
// nat chains, one per chunk (chunk.go; only the tools get chunks).
func (p *Proxier) restore(ctx context.Context, payload restorePayload, full bool) error {
	if !full || p.chunk <= 0 {
		return p.ipt.Restore(ctx, xtables.RestoreInput{Text: payload.text, Ops: payload.ops})
	}
	return p.restoreChunks(ctx, payload)
}

// largeClusterEndpoints is kube-proxy's threshold for terse rules.
const largeClusterEndpoints = 1000

func countEndpoints(m changetracker.EndpointsMap) int {
	n := 0
	for _, eps := range m {
		n += len(eps)
	}
	return n
}

// drifted is the Drifted hook: the canary chain of each table we write
// (nat first: it is the one flushed by hand most often) must still exist.
// Deleting our chains or flushing a whole table (iptables -F; iptables -X,
// firewalld reloads) deletes it. One ChainExists per table, stopping at
// the first missing one, except for a table whose Runner.TableStamp
// stamp is unchanged since it was last written or verified (the legacy
// backend: there ChainExists loads the whole table, and the stamp costs
// microseconds). BenchmarkKernelDriftCheck in BENCHMARKS.md has the
// figures.
func (p *Proxier) drifted(ctx context.Context) (bool, error) {
	for _, t := range driftTables {
		stamp, stamped, err := p.ipt.TableStamp(t)
		if err != nil {
			p.log.V(2).Info("No table stamp; checking the canary", "table", t, "error", err.Error())
			stamped = false
		}
		if old, ok := p.stamps[t]; stamped && ok && old == stamp {
			continue // unchanged since it held the canary
		}
		ok, err := p.ipt.ChainExists(ctx, t, xtables.ChainKubeProxyCanary)
		if err != nil {
			return false, err
		}
		if !ok {
			p.log.Info("Canary chain missing: the tables were changed behind our back", "table", t)
			return true, nil
		}
		if stamped {
			if p.stamps == nil {
				p.stamps = map[xtables.Table]uint64{}
			}
			p.stamps[t] = stamp
		}
	}
	return false, nil
}

// recordStamps notes the tables' stamps after a successful apply, which
// changed them. A full sync created the canaries, so every table is
// verified. A partial sync never touches them: a table whose stamp just
// before the restore (before) still matched its verified stamp held the
// canary then and still does; any other table is checked with a command
// at the next drift check.
func (p *Proxier) recordStamps(full bool, before map[xtables.Table]uint64) {
	after := p.tableStamps()
	verified := make(map[xtables.Table]uint64, len(after))
	for t, stamp := range after {
		old, ok := p.stamps[t]
		if full || (ok && before[t] == old) {
			verified[t] = stamp
		}
	}
	p.stamps = verified
}

// tableStamps returns the current stamp of each table that has one.
func (p *Proxier) tableStamps() map[xtables.Table]uint64 {
	out := make(map[xtables.Table]uint64, len(driftTables))
	for _, t := range driftTables {
		if stamp, ok, err := p.ipt.TableStamp(t); err == nil && ok {
			out[t] = stamp
		}
	}
	return out
}

// driftTables are canaryTables in the order drifted checks them.
var driftTables = []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle}

// dryRun is the DryRun hook: the iptables-restore input a full sync would
// apply now, touching nothing (no listing either, so deleting chains left
// by an earlier run is not shown).
func (p *Proxier) dryRun(_ context.Context, req *engine.Request) (string, error) {
	u := req.Update
	p.r.env.nodeLabels = u.NodeLabels
	p.r.setTail(p.cfg.IPFamily, p.cfg.NodePortAddresses, p.localAddresses())
	p.r.randomFull = true
	p.r.env.terse = countEndpoints(u.Endpoints) > largeClusterEndpoints
	out := string(p.r.renderFull(u.Services, u.Endpoints, nil).text)
	p.r.discard()
	p.r.releaseLarge()
	return out, nil
}

// ensureBase creates the fixed chains, the jump rules from the built-in
// chains, and the canaries, and returns the chains the nat table has. It
// reads each table once with iptables-save and writes only what the
// listings lack, in one iptables-restore (-N, -I; on a node without our
// chains ~45 iptables processes before); iptables -N / -C / -I one by one
// only when a listing failed: with the legacy backend each of those loads
// the whole table. Each listing is parsed in one pass (its chains, and the
// rules of the chains jump rules start from) rather than searched once per
// check (BenchmarkKernelSync in BENCHMARKS.md has the costs). If a listing
// fails, every check runs.
func (p *Proxier) ensureBase(ctx context.Context) (tableSums, error) {
	var existing tableSums
	listed := map[xtables.Table]*xtables.Listing{}
	p.kernel = nil
	// iptables-nft: one listing of every table costs what the nat one
	// alone does (xtables.Capabilities.SaveAll).
	var all []byte
	if p.saveAll {
		p.save.Reset()
		if err := p.ipt.SaveAllInto(ctx, &p.save); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			p.log.Error(err, "Listing every table; listing them one by one")
		} else {
			all = p.save.Bytes()
		}
	}
	for _, t := range canaryTables {
		var listing []byte
		if all != nil {
			listing = xtables.Section(all, t) // nil: the table has nothing
		} else {
			p.save.Reset()
			if err := p.ipt.SaveInto(ctx, t, &p.save); err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				p.log.Error(err, "Listing a table; checking its chains and jump rules one by one", "table", t)
				continue
			}
			listing = p.save.Bytes()
		}
		l := xtables.ParseListing(listing, t, xtables.JumpSources(p.jumpRules(), t)...)
		listed[t] = l
		if t == xtables.TableNAT || t == xtables.TableFilter {
			if p.kernel == nil {
				p.kernel = map[xtables.Table]tableSums{}
			}
			p.kernel[t] = sumListing(listing, t, &p.diff)
			if t == xtables.TableNAT {
				existing = p.kernel[t]
			}
		}
		if !l.HasChain(xtables.ChainKubeProxyCanary) && p.wrote {
			p.log.Info("Canary chain missing: the tables were flushed behind our back; rewriting everything", "table", t)
		}
	}
	if p.save.Cap() > 4<<20 {
		p.save = bytes.Buffer{} // do not keep a large listing between syncs
	}
	// What the listings show missing, in one restore; the commands one by
	// one only when a listing failed, or when that restore did (a chain
	// that appeared since the listing, say).
	canaries := make([]xtables.TableChain, 0, len(canaryTables))
	for _, t := range canaryTables {
		canaries = append(canaries, xtables.TableChain{Table: t, Chain: xtables.ChainKubeProxyCanary})
	}
	if data, ok := xtables.JumpRulesRestore(xtables.Prepend, p.jumpRules(), canaries, listed); ok {
		if len(data) == 0 {
			return existing, nil
		}
		err := p.ipt.Restore(ctx, xtables.RestoreInput{Text: data})
		if err == nil {
			return existing, nil
		}
		if ctx.Err() != nil || errors.Is(err, xtables.ErrLockHeld) {
			// The commands would each wait for the lock in turn.
			return nil, err
		}
		p.log.Error(err, "Creating the base chains and jump rules in one restore; running the commands one by one")
		listed = nil // a table before the failing one may have changed
	}
	if err := xtables.EnsureJumpRules(ctx, p.ipt, xtables.Prepend, p.jumpRules(), listed); err != nil {
		return nil, err
	}
	for _, t := range canaryTables {
		if l := listed[t]; l != nil && l.HasChain(xtables.ChainKubeProxyCanary) {
			continue
		}
		if _, err := p.ipt.EnsureChain(ctx, t, xtables.ChainKubeProxyCanary); err != nil {
			return nil, err
		}
	}
	return existing, nil
}

func (p *Proxier) localAddresses() []netip.Addr {
	if len(p.cfg.NodePortAddresses) == 0 {
		return nil
	}
	if p.cfg.LocalAddresses != nil {
		ips, err := p.cfg.LocalAddresses()
		if err != nil {
			p.log.Error(err, "Listing local addresses for node ports")
		}
		return ips
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		p.log.Error(err, "Listing local addresses for node ports")
		return nil
	}
	var ips []netip.Addr
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			ips = append(ips, pfx.Addr())
		}
	}
	return ips
}

// Render is the pure plan: the iptables-restore input of a full sync for
// the given services and endpoints, as the Proxier's DryRun returns it.
// randomFully writes MASQUERADE --random-fully, as the Proxier always does
// (kube-proxy v1.37 does; pass false only to render v1.34's output on an
// iptables that lacked the option); localAddresses are used for Config.NodePortAddresses.
func Render(cfg Config, services changetracker.ServicePortMap, endpoints changetracker.EndpointsMap, nodeLabels map[string]string, randomFully bool, localAddresses []netip.Addr) ([]byte, error) {
	cfg, err := cfg.withDefaults("")
	if err != nil {
		return nil, err
	}
	var r renderer
	r.env = newPlanEnv(&cfg)
	r.env.nodeLabels = nodeLabels
	r.mark = r.env.masqMark
	r.randomFull = randomFully
	r.env.terse = countEndpoints(endpoints) > largeClusterEndpoints
	r.setTail(cfg.IPFamily, cfg.NodePortAddresses, localAddresses)
	return bytes.Clone(r.renderFull(services, endpoints, nil).text), nil
}
