package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/runner"
	"github.com/svcproxy/svcproxy/proxy"
)

// Proxier is the iptables engine for one IP family. It is a proxy.Provider:
// the embedded change tracker records Service, EndpointSlice and Node
// events; Sync writes the rules; Run syncs on change and periodically.
// For dual stack, combine two with proxy.NewDualStack.
type Proxier struct {
	*changetracker.Tracker

	cfg  Config
	ipt  Runner
	log  logr.Logger
	loop *runner.Runner

	mu        sync.Mutex // serializes syncs and guards everything below
	r         renderer
	needFull  bool
	lastFull  time.Time
	save      bytes.Buffer
	pendingCT []ConntrackFilter
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier returns a Proxier driving ipt. Nothing touches the node until the
// first Sync (or Run) after the tracker is synced.
func NewProxier(cfg Config, ipt Runner) (*Proxier, error) {
	if ipt == nil {
		return nil, errors.New("iptables: nil Runner")
	}
	cfg, err := cfg.withDefaults(ipt.Family())
	if err != nil {
		return nil, err
	}
	p := &Proxier{cfg: cfg, ipt: ipt, log: cfg.Logger.WithValues("ipFamily", cfg.IPFamily), needFull: true}
	p.r.env = planEnv{
		nodeName:      cfg.NodeName,
		nodeIP:        cfg.nodeIP(),
		masqueradeAll: cfg.MasqueradeAll,
		ifLocal:       cfg.LocalDetector.IPTablesMatch(false),
		ifNotLocal:    cfg.LocalDetector.IPTablesMatch(true),
	}
	p.r.mark = fmt.Sprintf("%#x", 1<<uint(cfg.MasqueradeBit))
	p.r.env.masqMark = p.r.mark
	p.loop = runner.New("iptables-"+string(cfg.IPFamily), p.runOnce, runner.Config{
		MinInterval: cfg.MinSyncPeriod,
		MaxInterval: cfg.SyncPeriod,
		Clock:       cfg.Clock,
		Logger:      p.log,
	})
	p.Tracker = changetracker.New(changetracker.Config{
		IPFamily:         cfg.IPFamily,
		NodeName:         cfg.NodeName,
		ServiceProxyName: cfg.ServiceProxyName,
		Filter:           cfg.EndpointFilter,
		MakeServicePort:  makeServicePort,
		MakeEndpoint:     makeEndpoint,
		Logger:           p.log,
		OnChange:         p.onChange,
	})
	return p, nil
}

func (p *Proxier) onChange(changetracker.Change) {
	if hs := p.cfg.HealthServer; hs != nil {
		hs.QueuedUpdate(p.cfg.IPFamily)
	}
	p.cfg.Metrics.SetLastQueued(p.cfg.IPFamily, p.cfg.Clock.Now())
	p.loop.Trigger()
}

// Run syncs whenever something changed (at most once per MinSyncPeriod), at
// least every SyncPeriod, and retries failed syncs, until ctx ends.
func (p *Proxier) Run(ctx context.Context) error {
	p.loop.Trigger()
	return p.loop.Run(ctx)
}

func (p *Proxier) runOnce(ctx context.Context) error {
	err := p.Sync(ctx)
	if errors.Is(err, proxy.ErrNotSynced) {
		return nil // the handlers trigger again once synced
	}
	return err
}

// Sync programs the node now (see proxy.Provider). A full sync happens the
// first time, after any failure, when the node's labels changed, every
// SyncPeriod, and when the canary chain was found missing; otherwise only
// the services that changed are written. A failed apply returns a
// *SyncError (wrapping e.g. a *RestoreError), keeps the tracker's state,
// and makes the next sync full.
func (p *Proxier) Sync(ctx context.Context) error {
	if !p.Tracker.Synced() {
		return proxy.ErrNotSynced
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.Tracker.Update()
	return p.syncLocked(ctx, &u)
}

func (p *Proxier) syncLocked(ctx context.Context, u *changetracker.Update) error {
	clk := p.cfg.Clock
	start := clk.Now()
	p.r.env.nodeLabels = u.NodeLabels
	p.pendingCT = staleUDPFilters(u, p.pendingCT)

	full := p.needFull || u.NodeChanged
	if !full && clk.Since(p.lastFull) >= p.cfg.SyncPeriod {
		// ensureBase reports a missing canary from its listings: checking
		// it here with iptables -L would load the whole nat table (legacy,
		// 10,000 services: 0.5-0.8 s) only to log it.
		full = true
	}

	// Large clusters get terse rules (as kube-proxy above 1,000
	// endpoints); the switch needs every service rewritten.
	if terse := countEndpoints(u.Endpoints) > largeClusterEndpoints; terse != p.r.env.terse {
		p.r.env.terse = terse
		full = true
	}
	var payload []byte
	if full {
		existing, err := p.ensureBase(ctx)
		if err != nil {
			return p.failed(full, "ensure chains", err)
		}
		p.r.setTail(p.cfg.IPFamily, p.cfg.NodePortAddresses, p.localAddresses())
		p.r.randomFull = p.ipt.HasRandomFully()
		payload = p.r.renderFull(u.Services, u.Endpoints, existing)
	} else {
		payload = p.r.renderPartial(u.Services, u.Endpoints, u.ChangedServices, u.ServicePorts)
	}
	if len(payload) > 0 {
		if err := p.ipt.Restore(ctx, payload); err != nil {
			p.r.discard()
			p.r.releaseLarge()
			return p.failed(full, "restore", err)
		}
	}
	p.r.commit()
	p.r.releaseLarge()
	p.needFull = false
	if full {
		p.lastFull = start
	}
	m, fam, elapsed := p.cfg.Metrics, p.cfg.IPFamily, clk.Since(start)
	m.ObserveSync(fam, elapsed)
	if full {
		m.ObserveFullSync(fam, elapsed)
	} else {
		m.ObservePartialSync(fam, elapsed)
	}
	m.SetLastSync(fam, clk.Now())
	m.SetIPTablesRulesLastSync(fam, string(TableNAT), p.r.natLines)
	m.SetIPTablesRulesLastSync(fam, string(TableFilter), p.r.filterLines)
	p.log.V(2).Info("Synced iptables rules", "full", full, "services", len(u.Services),
		"changed", len(u.ChangedServices), "lines", p.r.out.lines, "bytes", len(payload), "elapsed", clk.Since(start))
	p.afterSync(u)
	return nil
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

func (p *Proxier) failed(full bool, step string, err error) error {
	p.needFull = true
	err = &SyncError{Full: full, Step: step, Err: err}
	if step == "restore" {
		p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
		if !full {
			p.cfg.Metrics.IncIPTablesPartialRestoreFailures(p.cfg.IPFamily)
		}
	}
	return err
}

// afterSync updates the health servers and cleans stale UDP conntrack
// entries, now that the rules no longer send traffic to them.
func (p *Proxier) afterSync(u *changetracker.Update) {
	if s := p.cfg.ServiceHealthServer; s != nil {
		if err := s.SyncServices(u.Services.HealthCheckNodePorts()); err != nil {
			p.log.Error(err, "Syncing health-check node ports")
		}
		if err := s.SyncEndpoints(u.Endpoints.LocalReadyEndpoints()); err != nil {
			p.log.Error(err, "Syncing health-check endpoint counts")
		}
	}
	if hs := p.cfg.HealthServer; hs != nil {
		hs.Updated(p.cfg.IPFamily)
	}
	if ct := p.cfg.Conntrack; ct != nil && len(p.pendingCT) > 0 {
		ctStart := p.cfg.Clock.Now()
		n, err := ct.DeleteUDP(p.cfg.IPFamily == v1.IPv6Protocol, p.pendingCT)
		p.cfg.Metrics.ObserveConntrackReconcile(p.cfg.IPFamily, p.cfg.Clock.Since(ctStart), int(n))
		if err != nil {
			// Not retried: the entries time out on their own (UDP: 30s/120s).
			p.log.Error(err, "Deleting stale UDP conntrack entries", "filters", len(p.pendingCT))
		} else {
			p.log.V(4).Info("Deleted stale UDP conntrack entries", "filters", len(p.pendingCT), "entries", n)
		}
	}
	p.pendingCT = p.pendingCT[:0]
}

// ensureBase creates the fixed chains, the jump rules from the built-in
// chains, and the canaries, and returns the chains the nat table has. It
// reads each table once with iptables-save and only runs iptables -N / -C /
// -I for what the listing lacks: with the legacy backend each of those
// loads the whole table (0.8 s for nat at 10,000 services), so checking
// every jump rule that way cost seconds per sync. Each listing is parsed
// in one pass (its chains, and the rules of the chains jump rules start
// from): searching the 33 MB nat listing of 10,000 services once per
// check cost 50 ms a search.
// If a listing fails, every check runs.
func (p *Proxier) ensureBase(ctx context.Context) (map[Chain]struct{}, error) {
	var existing map[Chain]struct{}
	listed := map[Table]*tableListing{}
	for _, t := range canaryTables {
		p.save.Reset()
		if err := p.ipt.SaveInto(ctx, t, &p.save); err != nil {
			p.log.Error(err, "Listing a table; checking its chains and jump rules one by one", "table", t)
			continue
		}
		l := parseListing(p.save.Bytes(), t)
		if t == TableNAT {
			existing = l.chains
		}
		listed[t] = l
		if _, ok := l.chains[ChainKubeProxyCanary]; !ok && !p.lastFull.IsZero() {
			p.log.Info("Canary chain missing: the tables were flushed behind our back; rewriting everything", "table", t)
		}
	}
	if p.save.Cap() > 4<<20 {
		p.save = bytes.Buffer{} // do not keep a large listing between syncs
	}
	ensured := map[Table]map[Chain]bool{}
	ensureChain := func(t Table, c Chain) error {
		if ensured[t][c] {
			return nil
		}
		if l := listed[t]; l != nil {
			if _, ok := l.chains[c]; ok {
				return nil
			}
		}
		if _, err := p.ipt.EnsureChain(ctx, t, c); err != nil {
			return err
		}
		if ensured[t] == nil {
			ensured[t] = map[Chain]bool{}
		}
		ensured[t][c] = true
		return nil
	}
	var w lineWriter
	for _, j := range jumpRules {
		if err := ensureChain(j.table, j.to); err != nil {
			return nil, err
		}
		args := j.args()
		if l := listed[j.table]; l != nil {
			w.reset()
			w.op("-A", j.from)
			for _, a := range args {
				if strings.IndexByte(a, ' ') >= 0 {
					a = `"` + a + `"`
				}
				w.w(a)
			}
			if _, ok := l.rules[string(w.buf)]; ok {
				continue
			}
		}
		if _, err := p.ipt.EnsureRule(ctx, Prepend, j.table, j.from, args...); err != nil {
			return nil, err
		}
	}
	for _, t := range canaryTables {
		if err := ensureChain(t, ChainKubeProxyCanary); err != nil {
			return nil, err
		}
	}
	return existing, nil
}

// tableListing is what ensureBase needs from one table's iptables-save
// output: the chains it declares, and the rules ("-A CHAIN ...", without
// the newline) of the chains that jump rules start from, which are
// built-in chains and short.
type tableListing struct {
	chains map[Chain]struct{}
	rules  map[string]struct{}
}

// parseListing reads iptables-save output of table in one pass.
func parseListing(data []byte, table Table) *tableListing {
	l := &tableListing{chains: map[Chain]struct{}{}, rules: map[string]struct{}{}}
	var from [][]byte
	for _, j := range jumpRules {
		if j.table == table {
			from = append(from, []byte("-A "+string(j.from)+" "))
		}
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		switch {
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			l.chains[Chain(name)] = struct{}{}
		case len(line) > 3 && line[0] == '-' && line[1] == 'A':
			for _, f := range from {
				if bytes.HasPrefix(line, f) {
					l.rules[string(line)] = struct{}{}
					break
				}
			}
		}
	}
	return l
}

// chainsInSave returns the chains declared in iptables-save output.
func chainsInSave(data []byte) map[Chain]struct{} {
	out := map[Chain]struct{}{}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) < 2 || line[0] != ':' {
			continue
		}
		name := line[1:]
		if j := bytes.IndexByte(name, ' '); j >= 0 {
			name = name[:j]
		}
		out[Chain(name)] = struct{}{}
	}
	return out
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

// Plan returns the iptables-restore input a full sync would apply now,
// without applying it (a dry run; it does no I/O). It applies the
// tracker's pending changes to its maps, so the next Sync is a full one.
// Deleting chains left by an earlier run is not shown: that needs the
// kernel's listing.
func (p *Proxier) Plan() ([]byte, error) {
	if !p.Tracker.Synced() {
		return nil, proxy.ErrNotSynced
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.Tracker.Update()
	p.pendingCT = staleUDPFilters(&u, p.pendingCT)
	p.needFull = true
	p.r.env.nodeLabels = u.NodeLabels
	p.r.setTail(p.cfg.IPFamily, p.cfg.NodePortAddresses, p.localAddresses())
	p.r.randomFull = p.ipt.HasRandomFully()
	p.r.env.terse = countEndpoints(u.Endpoints) > largeClusterEndpoints
	out := bytes.Clone(p.r.renderFull(u.Services, u.Endpoints, nil))
	p.r.discard()
	p.r.releaseLarge()
	return out, nil
}

// Render is the pure plan: the iptables-restore input of a full sync for
// the given services and endpoints, as Proxier.Plan would return it.
// randomFully says whether MASQUERADE --random-fully is available;
// localAddresses are used for Config.NodePortAddresses.
func Render(cfg Config, services changetracker.ServicePortMap, endpoints changetracker.EndpointsMap, nodeLabels map[string]string, randomFully bool, localAddresses []netip.Addr) ([]byte, error) {
	cfg, err := cfg.withDefaults(cfg.IPFamily)
	if err != nil {
		return nil, err
	}
	var r renderer
	r.env = planEnv{
		nodeName:      cfg.NodeName,
		nodeLabels:    nodeLabels,
		nodeIP:        cfg.nodeIP(),
		masqueradeAll: cfg.MasqueradeAll,
		ifLocal:       cfg.LocalDetector.IPTablesMatch(false),
		ifNotLocal:    cfg.LocalDetector.IPTablesMatch(true),
	}
	r.mark = fmt.Sprintf("%#x", 1<<uint(cfg.MasqueradeBit))
	r.randomFull = randomFully
	r.env.terse = countEndpoints(endpoints) > largeClusterEndpoints
	r.setTail(cfg.IPFamily, cfg.NodePortAddresses, localAddresses)
	return bytes.Clone(r.renderFull(services, endpoints, nil)), nil
}

var _ = types.NamespacedName{}
