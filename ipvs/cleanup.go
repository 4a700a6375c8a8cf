package ipvs

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// cleanup (engine.Hooks.Cleanup, so Proxier.Cleanup) removes what the
// IPVS proxier puts on a node: its iptables hooks and chains, the virtual
// servers it owns (addresses bound to kube-ipvs0, node ports listed in its
// node-port sets; never any inside ExcludeCIDRs or of the other family),
// the kube-ipvs0 addresses, the kube-ipvs0 link (unless excluded addresses
// remain on it) and its ipsets. It goes on past failures and returns them
// joined. Use it when switching a node to another mode.
func (p *Proxier) cleanup(ctx context.Context) error {
	var errs []error
	ipt := p.ifs.IPTables
	if err := xtables.DeleteJumpRules(ctx, ipt, jumpRules); err != nil {
		errs = append(errs, err)
	}
	for _, tc := range []struct {
		table  xtables.Table
		chains []xtables.Chain
	}{{xtables.TableNAT, natChains}, {xtables.TableFilter, filterChains}} {
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
	p.graceful = newGracefulQueue()
	p.canary = nil
	if len(errs) > 0 {
		return fmt.Errorf("ipvs: cleanup: %w", errors.Join(errs...))
	}
	return nil
}
