package ipvskernel

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
)

// InterfacesOptions configure NewInterfaces.
type InterfacesOptions struct {
	// Options configure the IPVS, ipset and netlink handles (their
	// network namespace, their socket timeout).
	Options
	// Family is the IP family of the iptables runner NewInterfaces builds
	// (v1.IPv6Protocol; anything else means IPv4).
	Family v1.IPFamily
	// IPTables, if set, is the runner of the engine's iptables rules
	// (one built with the embedder's xtables.RunnerConfig, say); nil
	// means xtables.New with Family and xtables.BackendAuto.
	IPTables xtables.Runner
}

// NewInterfaces returns the real kernel interfaces of an ipvs.Proxier:
// IPVS, ipset and netlink handles (New, NewIPSet, NewNetlink), the
// iptables runner and /proc/sys (NewSysctl). The handles belong to the
// namespace of Options.NetNSPath, or of the calling thread when it is "";
// the iptables runner and Sysctl act in the namespace of the thread that
// calls them. Interfaces.IPVS.Close releases the IPVS handle. Off Linux
// it fails with ipvs.ErrNotSupported.
func NewInterfaces(opts InterfacesOptions) (ipvs.Interfaces, error) {
	var ifs ipvs.Interfaces
	var err error
	if ifs.IPVS, err = New(opts.Options); err != nil {
		return ipvs.Interfaces{}, err
	}
	fail := func(err error) (ipvs.Interfaces, error) {
		_ = ifs.IPVS.Close()
		return ipvs.Interfaces{}, err
	}
	if ifs.IPSet, err = NewIPSet(opts.Options); err != nil {
		return fail(err)
	}
	if ifs.Netlink, err = NewNetlink(opts.Options); err != nil {
		return fail(err)
	}
	ifs.IPTables = opts.IPTables
	if ifs.IPTables == nil {
		family := v1.IPv4Protocol
		if opts.Family == v1.IPv6Protocol {
			family = v1.IPv6Protocol
		}
		if ifs.IPTables, err = xtables.New(xtables.RunnerConfig{Family: family, Backend: xtables.BackendAuto}); err != nil {
			return fail(fmt.Errorf("ipvs: iptables: %w", err))
		}
	}
	ifs.Sysctl = NewSysctl()
	return ifs, nil
}
