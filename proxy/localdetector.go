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
