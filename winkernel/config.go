package winkernel

import (
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Defaults for zero Config fields.
const (
	DefaultRootHNSEndpointName = "cbr0"
	DefaultHealthzPort         = 10256
	// RemoteEndpointNamePrefix names the remote HNS endpoints this engine
	// creates; Cleanup and the stale-endpoint sweep delete only remote
	// endpoints so named (or ones this process referenced).
	RemoteEndpointNamePrefix = "svcproxy-remote-"
)

// Config configures a winkernel Proxier. Every field has a documented
// zero value; the fields of engine.Common are promoted (cfg.NodeName).
type Config struct {
	engine.Common

	// NetworkName is the HNS network the pods are on (kube-proxy's
	// --network-name / KUBE_NETWORK). Required.
	NetworkName string
	// SourceVIP is the address load balancers SNAT to (kube-proxy's
	// --source-vip). Required on overlay networks, where the engine also
	// keeps a host-local endpoint with this address. Zero on l2bridge:
	// the node IP.
	SourceVIP netip.Addr
	// HostMAC is the MAC address written on the overlay source-VIP
	// endpoint and on the remote endpoints for cluster IPs (kube-proxy
	// takes the MAC of the interface holding the node IP). Empty: none.
	HostMAC string
	// EnableDSR turns on direct server return for cluster-IP load
	// balancers (--enable-dsr). DSR is used for externalTrafficPolicy:
	// Local and the preserve-destination annotation regardless, when HNS
	// supports it.
	EnableDSR bool
	// RootHNSEndpointName names the host-local endpoint that health-check
	// VIP load balancers forward to (zero: "cbr0").
	RootHNSEndpointName string
	// ForwardHealthCheckVIP adds, for each load-balancer ingress IP, a
	// load balancer that forwards the service's health-check node port
	// (or HealthzPort) on that IP to the root endpoint.
	ForwardHealthCheckVIP bool
	// HealthzPort is the proxy's healthz port, used for health-check VIPs
	// of services without a health-check node port (zero: 10256).
	HealthzPort int
}

// Interfaces are what the engine drives.
type Interfaces struct {
	// HNS is the host's HNS (NewHNS) or a fake. Required.
	HNS HNS
}

func (c Config) withDefaults() (Config, error) {
	common, err := c.Common.WithDefaults(c.IPFamily)
	if err != nil {
		return c, err
	}
	c.Common = common
	if c.NetworkName == "" {
		return c, errors.New("winkernel: NetworkName is required")
	}
	if c.RootHNSEndpointName == "" {
		c.RootHNSEndpointName = DefaultRootHNSEndpointName
	}
	if c.HealthzPort == 0 {
		c.HealthzPort = DefaultHealthzPort
	}
	if c.HealthzPort < 0 || c.HealthzPort > 65535 {
		return c, fmt.Errorf("winkernel: HealthzPort %d out of range", c.HealthzPort)
	}
	if c.SourceVIP.IsValid() && c.SourceVIP.Unmap().Is4() != (c.IPFamily == v1.IPv4Protocol) {
		return c, fmt.Errorf("winkernel: SourceVIP %s is not of family %s", c.SourceVIP, c.IPFamily)
	}
	c.SourceVIP = c.SourceVIP.Unmap()
	return c, nil
}
