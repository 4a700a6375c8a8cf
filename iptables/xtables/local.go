package xtables

import "github.com/svcproxy/svcproxy/proxy"

// LocalMatch returns the iptables match for "from a local pod" as d
// configures it (negate: "not from a local pod"), or nil when detection is
// off (proxy.LocalModeNone). d is assumed valid (d.Validate).
//
//	ClusterCIDR, NodeCIDR   -s <cidr>
//	BridgeInterface         -i <bridge>
//	InterfaceNamePrefix     -i <prefix>+
func LocalMatch(d proxy.LocalDetector, negate bool) []string {
	var flag, value string
	switch d.Mode {
	case proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR:
		flag, value = "-s", d.CIDR.Masked().String()
	case proxy.LocalModeBridgeInterface:
		flag, value = "-i", d.Interface
	case proxy.LocalModeInterfaceNamePrefix:
		flag, value = "-i", d.Interface+"+"
	default:
		return nil
	}
	if negate {
		return []string{"!", flag, value}
	}
	return []string{flag, value}
}
