package ipvs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
)

// Cleanup removes what the IPVS proxier puts on a node: its iptables hooks
// and chains, the virtual servers it owns (addresses bound to kube-ipvs0,
// node ports listed in its node-port sets; never any inside ExcludeCIDRs
// or of the other family), the kube-ipvs0 addresses, the kube-ipvs0 link
// (unless excluded addresses remain on it) and its ipsets. It goes on past
// failures and returns them joined. Use it when switching a node to
// another mode; do not run it while the proxier syncs.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	ipt := p.ifs.IPTables
	for _, j := range jumpRules {
		if err := ipt.DeleteRule(ctx, j.table, j.from, j.args()...); err != nil {
			errs = append(errs, err)
		}
	}
	for _, tc := range []struct {
		table  iptables.Table
		chains []iptables.Chain
	}{{iptables.TableNAT, natChains}, {iptables.TableFilter, filterChains}} {
		for _, c := range tc.chains {
			if ok, err := ipt.ChainExists(ctx, tc.table, c); err != nil || !ok {
				continue
			}
			if err := ipt.FlushChain(ctx, tc.table, c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range tc.chains {
			if ok, err := ipt.ChainExists(ctx, tc.table, c); err != nil || !ok {
				continue
			}
			if err := ipt.DeleteChain(ctx, tc.table, c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	k, err := p.readKernel()
	if err != nil {
		errs = append(errs, err)
	}
	keepLink := false
	if k != nil {
		for key, vs := range k.vss {
			if !p.ourFamily(key.Address) || p.excluded(key.Address) {
				continue
			}
			if p.owns(k, key) {
				if err := p.ifs.IPVS.DeleteVirtualServer(vs); err != nil && !isNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
		for a := range k.addrs {
			if !p.ourFamily(a) || p.excluded(a) {
				keepLink = true
				continue
			}
			if err := p.ifs.Netlink.UnbindAddress(a, DummyDevice); err != nil && !isNotFound(err) {
				errs = append(errs, err)
			}
		}
		for name := range k.sets {
			if err := p.ifs.IPSet.DestroySet(name); err != nil && !isNotFound(err) {
				errs = append(errs, err)
			}
		}
	} else {
		keepLink = true
	}
	if !keepLink {
		if err := p.ifs.Netlink.DeleteDummyDevice(DummyDevice); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	p.dp = newDataplane()
	p.planned = false
	clear(p.owned)
	p.plans = make(map[proxy.ServicePortName]*servicePlan)
	p.byName = make(map[types.NamespacedName][]proxy.ServicePortName)
	p.needFull = true
	if len(errs) > 0 {
		return fmt.Errorf("ipvs: cleanup: %w", errors.Join(errs...))
	}
	return nil
}

// DryRun computes what a full sync would change, without changing
// anything: the IPVS, address and ipset operations as ipvsadm / ip / ipset
// commands, then the iptables-restore input. It reads the kernel. Like
// Sync it needs the initial lists synced (proxy.ErrNotSynced otherwise).
// The next Sync is a full one.
func (p *Proxier) DryRun(ctx context.Context) (string, error) {
	if !p.Synced() {
		return "", proxy.ErrNotSynced
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.Update()
	npa, err := p.computeNodePortAddrs()
	if err != nil {
		return "", err
	}
	saveAddrs, savePlans, saveNames, saveDP := p.nodePortAddrs, p.plans, p.byName, p.dp
	p.nodePortAddrs = npa
	in := p.planInput(u.NodeLabels)
	want := newDataplane()
	for spn, svc := range u.Services {
		want.replace(spn, nil, planService(in, spn, svc, u.Endpoints[spn]), nil)
	}
	k, err := p.readKernel()
	if err != nil {
		return "", fmt.Errorf("ipvs: read kernel state: %w", err)
	}
	graceful := p.graceful
	p.graceful = newGracefulQueue() // the diff may queue; keep the real queue untouched
	ops := p.diffKernel(want, k)
	p.graceful = graceful
	p.nodePortAddrs, p.plans, p.byName, p.dp = saveAddrs, savePlans, saveNames, saveDP
	p.needFull = true
	p.planned = false // the changes this Update consumed are not in the plans
	var b strings.Builder
	fmt.Fprintf(&b, "# ipvs %s: %d change(s)\n", p.cfg.IPFamily, len(ops))
	b.WriteString(ops.String())
	b.WriteString("# iptables-restore --noflush\n")
	p.rulesBuf.Reset()
	writeRules(&p.rulesBuf, &p.cfg, p.ifs.IPTables.HasRandomFully())
	b.Write(p.rulesBuf.Bytes())
	return b.String(), nil
}
