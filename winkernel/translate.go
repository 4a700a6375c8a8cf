package winkernel

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// The hcn* types mirror the JSON shapes of hnslib's hcn package
// (HostComputeLoadBalancer, HostComputeEndpoint, HostComputeNetwork and
// their policies), which builds only on Windows. The real adapter
// (hns_windows.go) converts hcn values to and from these through JSON, so
// the field translation below is plain Go that runs and is tested on every
// OS.

type hcnSchemaVersion struct {
	Major int `json:",omitempty"`
	Minor int `json:",omitempty"`
}

var schemaV2 = hcnSchemaVersion{Major: 2, Minor: 0}

type hcnPortMapping struct {
	Protocol         uint32 `json:",omitempty"`
	InternalPort     uint16 `json:",omitempty"`
	ExternalPort     uint16 `json:",omitempty"`
	DistributionType uint32 `json:",omitempty"`
	Flags            uint32 `json:",omitempty"`
}

type hcnLoadBalancer struct {
	ID                   string           `json:"ID,omitempty"`
	HostComputeEndpoints []string         `json:",omitempty"`
	SourceVIP            string           `json:",omitempty"`
	FrontendVIPs         []string         `json:",omitempty"`
	PortMappings         []hcnPortMapping `json:",omitempty"`
	SchemaVersion        hcnSchemaVersion `json:",omitempty"`
	Flags                uint32           `json:",omitempty"`
}

// hcn's LoadBalancerFlags and LoadBalancerPortMappingFlags values;
// VipExternalIP (16) is not named by hcn (kube-proxy defines it too).
const (
	hcnLBFlagDSR  = 1
	hcnLBFlagIPv6 = 2

	hcnPMFlagILB            = 1
	hcnPMFlagLocalRoutedVIP = 2
	hcnPMFlagUseMux         = 4
	hcnPMFlagPreserveDIP    = 8
	hcnPMFlagVipExternalIP  = 16
)

var lbFlagBits = []struct {
	ours LBFlags
	hcn  uint32
}{{FlagDSR, hcnLBFlagDSR}, {FlagIPv6, hcnLBFlagIPv6}}

var pmFlagBits = []struct {
	ours LBFlags
	hcn  uint32
}{
	{FlagILB, hcnPMFlagILB}, {FlagLocalRoutedVIP, hcnPMFlagLocalRoutedVIP}, {FlagUseMux, hcnPMFlagUseMux},
	{FlagPreserveDIP, hcnPMFlagPreserveDIP}, {FlagVipExternalIP, hcnPMFlagVipExternalIP},
}

func lbToHCN(lb LoadBalancer) hcnLoadBalancer {
	out := hcnLoadBalancer{
		ID:                   lb.ID,
		HostComputeEndpoints: append([]string(nil), lb.EndpointIDs...),
		SchemaVersion:        schemaV2,
	}
	if lb.SourceVIP.IsValid() {
		out.SourceVIP = lb.SourceVIP.String()
	}
	for _, v := range lb.FrontendVIPs {
		out.FrontendVIPs = append(out.FrontendVIPs, v.String())
	}
	pm := hcnPortMapping{
		Protocol:         uint32(lb.Protocol),
		InternalPort:     lb.InternalPort,
		ExternalPort:     lb.ExternalPort,
		DistributionType: uint32(lb.Distribution),
	}
	for _, b := range lbFlagBits {
		if lb.Flags&b.ours != 0 {
			out.Flags |= b.hcn
		}
	}
	for _, b := range pmFlagBits {
		if lb.Flags&b.ours != 0 {
			pm.Flags |= b.hcn
		}
	}
	out.PortMappings = []hcnPortMapping{pm}
	return out
}

// lbFromHCN translates a listed LB. An LB with several port mappings (not
// one of kube-proxy's) keeps only its first; one with none has port 0.
func lbFromHCN(in hcnLoadBalancer) (LoadBalancer, error) {
	lb := LoadBalancer{ID: in.ID, EndpointIDs: append([]string(nil), in.HostComputeEndpoints...)}
	var err error
	if in.SourceVIP != "" {
		if lb.SourceVIP, err = netip.ParseAddr(in.SourceVIP); err != nil {
			return lb, fmt.Errorf("load balancer %s: source VIP: %w", in.ID, err)
		}
	}
	for _, s := range in.FrontendVIPs {
		v, err := netip.ParseAddr(s)
		if err != nil {
			return lb, fmt.Errorf("load balancer %s: frontend VIP: %w", in.ID, err)
		}
		lb.FrontendVIPs = append(lb.FrontendVIPs, v)
	}
	for _, b := range lbFlagBits {
		if in.Flags&b.hcn != 0 {
			lb.Flags |= b.ours
		}
	}
	if len(in.PortMappings) > 0 {
		pm := in.PortMappings[0]
		lb.Protocol = uint16(pm.Protocol)
		lb.InternalPort, lb.ExternalPort = pm.InternalPort, pm.ExternalPort
		lb.Distribution = Distribution(pm.DistributionType)
		for _, b := range pmFlagBits {
			if pm.Flags&b.hcn != 0 {
				lb.Flags |= b.ours
			}
		}
	}
	return lb, nil
}

type hcnIPConfig struct {
	IpAddress    string `json:",omitempty"`
	PrefixLength uint8  `json:",omitempty"`
}

type hcnPolicy struct {
	Type     string          `json:""`
	Settings json.RawMessage `json:",omitempty"`
}

type hcnProviderAddressSetting struct {
	ProviderAddress string `json:",omitempty"`
}

type hcnEndpoint struct {
	ID                 string           `json:"ID,omitempty"`
	Name               string           `json:",omitempty"`
	HostComputeNetwork string           `json:",omitempty"`
	Policies           []hcnPolicy      `json:",omitempty"`
	IpConfigurations   []hcnIPConfig    `json:",omitempty"`
	MacAddress         string           `json:",omitempty"`
	Flags              uint32           `json:",omitempty"`
	SchemaVersion      hcnSchemaVersion `json:",omitempty"`
}

const (
	hcnEndpointFlagRemote      = 1
	hcnPolicyProviderAddress   = "ProviderAddress"
	hcnPolicyRemoteSubnetRoute = "RemoteSubnetRoute"
)

func endpointToHCN(ep Endpoint) (hcnEndpoint, error) {
	out := hcnEndpoint{
		ID: ep.ID, Name: ep.Name, HostComputeNetwork: ep.NetworkID, MacAddress: ep.MAC,
		SchemaVersion: schemaV2,
	}
	if ep.IP.IsValid() {
		out.IpConfigurations = []hcnIPConfig{{IpAddress: ep.IP.String()}}
	}
	if ep.Remote {
		out.Flags |= hcnEndpointFlagRemote
	}
	if ep.ProviderAddress.IsValid() {
		s, err := json.Marshal(hcnProviderAddressSetting{ProviderAddress: ep.ProviderAddress.String()})
		if err != nil {
			return out, err
		}
		out.Policies = append(out.Policies, hcnPolicy{Type: hcnPolicyProviderAddress, Settings: s})
	}
	return out, nil
}

func endpointFromHCN(in hcnEndpoint) (Endpoint, error) {
	ep := Endpoint{ID: in.ID, Name: in.Name, NetworkID: in.HostComputeNetwork, MAC: in.MacAddress,
		Remote: in.Flags&hcnEndpointFlagRemote != 0}
	if len(in.IpConfigurations) > 0 && in.IpConfigurations[0].IpAddress != "" {
		ip, err := netip.ParseAddr(in.IpConfigurations[0].IpAddress)
		if err != nil {
			return ep, fmt.Errorf("endpoint %s: %w", in.ID, err)
		}
		ep.IP = ip
	}
	for _, p := range in.Policies {
		if p.Type != hcnPolicyProviderAddress {
			continue
		}
		var s hcnProviderAddressSetting
		if err := json.Unmarshal(p.Settings, &s); err != nil {
			return ep, fmt.Errorf("endpoint %s: provider address policy: %w", in.ID, err)
		}
		if s.ProviderAddress != "" {
			pa, err := netip.ParseAddr(s.ProviderAddress)
			if err != nil {
				return ep, fmt.Errorf("endpoint %s: provider address: %w", in.ID, err)
			}
			ep.ProviderAddress = pa
		}
	}
	return ep, nil
}

type hcnRemoteSubnetSetting struct {
	DestinationPrefix           string
	IsolationId                 uint16
	ProviderAddress             string
	DistributedRouterMacAddress string
}

type hcnNetwork struct {
	ID       string      `json:"ID,omitempty"`
	Name     string      `json:",omitempty"`
	Type     string      `json:",omitempty"`
	Policies []hcnPolicy `json:",omitempty"`
}

// networkFromHCN translates a network; remote-subnet policies that do not
// parse are skipped (reported in the second result), not fatal.
func networkFromHCN(in hcnNetwork) (*Network, []error) {
	n := &Network{ID: in.ID, Name: in.Name, Type: NetworkType(in.Type)}
	var errs []error
	for _, p := range in.Policies {
		if p.Type != hcnPolicyRemoteSubnetRoute {
			continue
		}
		var s hcnRemoteSubnetSetting
		if err := json.Unmarshal(p.Settings, &s); err != nil {
			errs = append(errs, fmt.Errorf("network %s: remote subnet policy: %w", in.Name, err))
			continue
		}
		prefix, err := netip.ParsePrefix(s.DestinationPrefix)
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: remote subnet: %w", in.Name, err))
			continue
		}
		rs := RemoteSubnet{DestinationPrefix: prefix.Masked(), IsolationID: s.IsolationId, DRMACAddress: s.DistributedRouterMacAddress}
		if s.ProviderAddress != "" {
			if rs.ProviderAddress, err = netip.ParseAddr(s.ProviderAddress); err != nil {
				errs = append(errs, fmt.Errorf("network %s: remote subnet provider address: %w", in.Name, err))
				continue
			}
		}
		n.RemoteSubnets = append(n.RemoteSubnets, rs)
	}
	return n, errs
}

// convertJSON moves a value between hcn's type and its mirror here.
func convertJSON(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}
