package winkernel

import (
	"net/netip"
	"slices"
)

// planRemotes adds the remote endpoints every planned LB needs: one per
// backend on another node (few per service: a linear look for duplicates
// costs less than a set).
func planRemotes(env *planEnv, plan *servicePlan) {
	for _, lb := range plan.LBs {
		for _, b := range lb.Backends {
			if b.Local || slices.ContainsFunc(plan.Remotes, func(r wantRemote) bool { return r.IP == b.IP }) {
				continue
			}
			plan.Remotes = append(plan.Remotes, env.remoteFor(b.IP))
		}
	}
}

// sourceVIPFor picks the LB's source VIP as kube-proxy does: on overlay,
// the node IP when a remote backend is a node's address (a provider
// address) or outside every remote subnet (a public address), else the
// configured source VIP.
func (env *planEnv) sourceVIPFor(sets ...[]backend) netip.Addr {
	if !env.overlay {
		return env.sourceVIP
	}
	for _, backends := range sets {
		for _, b := range backends {
			if b.Local {
				continue
			}
			pa, ok := env.network.ProviderAddressFor(b.IP)
			if !ok || pa == b.IP {
				return env.nodeIP
			}
		}
	}
	return env.sourceVIP
}

// remoteFor is the remote endpoint for a backend on another node: on
// overlay, with the provider address of its remote subnet (the node IP
// when none holds it); on l2bridge with a MAC made up from the address.
func (env *planEnv) remoteFor(ip netip.Addr) wantRemote {
	r := wantRemote{IP: ip, MAC: conjureMAC(ip)}
	if env.overlay {
		if pa, ok := env.network.ProviderAddressFor(ip); ok {
			r.ProviderAddress = pa
		} else {
			r.ProviderAddress = env.nodeIP
		}
	}
	return r
}

// conjureMAC makes a MAC for a remote endpoint from its address, as
// kube-proxy does ("02-11-" and the last four bytes): it is never sent on
// the wire, only keeps the endpoints distinct.
func conjureMAC(ip netip.Addr) string {
	b := ip.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	if !ip.Is4() && !ip.Is4In6() {
		last = [4]byte{b[15], b[14], b[13], b[12]}
	}
	const hexDigits = "0123456789abcdef"
	mac := []byte("02-11-00-00-00-00")
	for i, x := range last {
		mac[6+3*i], mac[7+3*i] = hexDigits[x>>4], hexDigits[x&0xf]
	}
	return string(mac)
}
