package proxy

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// LocalMode says how an engine tells traffic from this node's pods apart
// from other traffic (kube-proxy's --detect-local-mode).
type LocalMode string

const (
	// LocalModeNone: no detection. Traffic to cluster IPs is then
	// masqueraded only with masquerade-all, and externalTrafficPolicy: Local
	// services do not short-circuit pod traffic to the cluster endpoints.
	LocalModeNone LocalMode = ""
	// LocalModeClusterCIDR: pods are the sources inside LocalDetector.CIDR
	// (the cluster's pod CIDR of the engine's family).
	LocalModeClusterCIDR LocalMode = "ClusterCIDR"
	// LocalModeNodeCIDR: pods are the sources inside LocalDetector.CIDR
	// (this node's pod CIDR of the engine's family).
	LocalModeNodeCIDR LocalMode = "NodeCIDR"
	// LocalModeBridgeInterface: pod traffic arrives on LocalDetector.Interface.
	LocalModeBridgeInterface LocalMode = "BridgeInterface"
	// LocalModeInterfaceNamePrefix: pod traffic arrives on interfaces whose
	// name starts with LocalDetector.Interface.
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// LocalDetector configures local-traffic detection, shared by every engine
// that writes iptables rules. The zero value is LocalModeNone.
type LocalDetector struct {
	Mode LocalMode
	// CIDR for the ClusterCIDR and NodeCIDR modes (of the engine's family).
	CIDR netip.Prefix
	// Interface is the bridge name, or the interface-name prefix.
	Interface string
}

// Validate checks the detector against the engine's IP family.
func (d LocalDetector) Validate(family v1.IPFamily) error {
	switch d.Mode {
	case LocalModeNone:
		return nil
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		if !d.CIDR.IsValid() {
			return fmt.Errorf("local detector %s needs a CIDR", d.Mode)
		}
		if d.CIDR.Addr().Is4() != (family == v1.IPv4Protocol) {
			return fmt.Errorf("local detector CIDR %s is not of family %s", d.CIDR, family)
		}
		return nil
	case LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
		if d.Interface == "" {
			return fmt.Errorf("local detector %s needs an interface name", d.Mode)
		}
		return nil
	}
	return fmt.Errorf("unknown local detector mode %q", d.Mode)
}

// IPTablesMatch returns the iptables match for "from a local pod" (negate:
// "not from a local pod"), or nil when detection is off.
//
// Deprecated: use xtables.LocalMatch (package iptables/xtables); this
// copy stays only while the ipvs engine moves to it, and then goes.
func (d LocalDetector) IPTablesMatch(negate bool) []string {
	var flag, value string
	switch d.Mode {
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		flag, value = "-s", d.CIDR.Masked().String()
	case LocalModeBridgeInterface:
		flag, value = "-i", d.Interface
	case LocalModeInterfaceNamePrefix:
		flag, value = "-i", d.Interface+"+"
	default:
		return nil
	}
	if negate {
		return []string{"!", flag, value}
	}
	return []string{flag, value}
}
