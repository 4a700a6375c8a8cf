//go:build windows

package winkernel

import (
	"errors"
	"fmt"

	"github.com/Microsoft/hnslib/hcn"
)

// NewHNS returns the host's HNS, through hnslib's hcn package (HNS API
// v2). It fails when the host has no v2 API.
func NewHNS() (HNS, error) {
	if err := hcn.V2ApiSupported(); err != nil {
		return nil, fmt.Errorf("HNS v2 API: %w", err)
	}
	return realHNS{}, nil
}

type realHNS struct{}

// wrapErr adds our sentinel to hcn's error, keeping both for errors.Is/As.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case hcn.IsNetworkNotFoundError(err):
		return fmt.Errorf("hns %s: %w: %w: %w", op, ErrNetworkNotFound, ErrNotFound, err)
	case hcn.IsInvalidIPError(err):
		return fmt.Errorf("hns %s: %w: %w: %w", op, ErrInvalidIP, ErrInvalid, err)
	case hcn.IsPortAlreadyExistsError(err):
		return fmt.Errorf("hns %s: %w: %w", op, ErrPortAlreadyExists, err)
	case hcn.IsNotImplemented(err):
		return fmt.Errorf("hns %s: %w: %w", op, ErrNotImplemented, err)
	case hcn.IsNotFoundError(err), hcn.IsElementNotFoundError(err), hcn.IsEndpointNotFoundError(err):
		return fmt.Errorf("hns %s: %w: %w", op, ErrNotFound, err)
	}
	var nf hcn.NetworkNotFoundError
	if errors.As(err, &nf) {
		return fmt.Errorf("hns %s: %w: %w: %w", op, ErrNetworkNotFound, ErrNotFound, err)
	}
	return fmt.Errorf("hns %s: %w", op, err)
}

func (realHNS) GetNetworkByName(name string) (*Network, error) {
	hn, err := hcn.GetNetworkByName(name)
	if err != nil {
		return nil, wrapErr("get network "+name, err)
	}
	var mirror hcnNetwork
	if err := convertJSON(hn, &mirror); err != nil {
		return nil, fmt.Errorf("hns network %s: %w", name, err)
	}
	n, errs := networkFromHCN(mirror)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if f, err := hcn.GetCachedSupportedFeatures(); err == nil {
		n.Features = Features{
			DSR: f.DSR, SessionAffinity: f.SessionAffinity, IPv6DualStack: f.IPv6DualStack,
			ModifyLoadBalancer: f.ModifyLoadbalancer, RemoteSubnet: f.RemoteSubnet,
		}
	}
	if g, err := hcn.GetGlobals(); err == nil {
		n.Version = Version{Major: g.Version.Major, Minor: g.Version.Minor}
	}
	return n, nil
}

func (realHNS) ListEndpoints(networkID string) ([]Endpoint, error) {
	var list []hcn.HostComputeEndpoint
	var err error
	if networkID == "" {
		list, err = hcn.ListEndpoints()
	} else {
		list, err = hcn.ListEndpointsOfNetwork(networkID)
	}
	if err != nil {
		return nil, wrapErr("list endpoints", err)
	}
	out := make([]Endpoint, 0, len(list))
	for i := range list {
		var mirror hcnEndpoint
		if err := convertJSON(&list[i], &mirror); err != nil {
			return nil, fmt.Errorf("hns endpoint %s: %w", list[i].Id, err)
		}
		ep, err := endpointFromHCN(mirror)
		if err != nil {
			if networkID == "" {
				// Every network's: the ID says the endpoint exists.
				out = append(out, Endpoint{ID: ep.ID, Name: ep.Name, NetworkID: ep.NetworkID})
			}
			continue // not an address we can use (no IP configuration we understand)
		}
		out = append(out, ep)
	}
	return out, nil
}

func (realHNS) CreateEndpoint(networkID string, ep Endpoint) (Endpoint, error) {
	network, err := hcn.GetNetworkByID(networkID)
	if err != nil {
		return Endpoint{}, wrapErr("get network", err)
	}
	mirror, err := endpointToHCN(ep)
	if err != nil {
		return Endpoint{}, err
	}
	mirror.ID, mirror.HostComputeNetwork = "", network.Id
	mirror.Flags = 0 // CreateRemoteEndpoint sets the remote flag itself
	var hep hcn.HostComputeEndpoint
	if err := convertJSON(mirror, &hep); err != nil {
		return Endpoint{}, err
	}
	var created *hcn.HostComputeEndpoint
	if ep.Remote {
		created, err = network.CreateRemoteEndpoint(&hep)
	} else {
		created, err = network.CreateEndpoint(&hep)
	}
	if err != nil {
		return Endpoint{}, wrapErr("create endpoint "+ep.IP.String(), err)
	}
	var back hcnEndpoint
	if err := convertJSON(created, &back); err != nil {
		return Endpoint{}, err
	}
	return endpointFromHCN(back)
}

func (realHNS) DeleteEndpoint(id string) error {
	ep, err := hcn.GetEndpointByID(id)
	if err != nil {
		return wrapErr("get endpoint "+id, err)
	}
	return wrapErr("delete endpoint "+id, ep.Delete())
}

func (realHNS) ListLoadBalancers() ([]LoadBalancer, error) {
	list, err := hcn.ListLoadBalancers()
	if err != nil {
		return nil, wrapErr("list load balancers", err)
	}
	out := make([]LoadBalancer, 0, len(list))
	for i := range list {
		var mirror hcnLoadBalancer
		if err := convertJSON(&list[i], &mirror); err != nil {
			return nil, fmt.Errorf("hns load balancer %s: %w", list[i].Id, err)
		}
		lb, err := lbFromHCN(mirror)
		if err != nil {
			continue // not one of ours: we only write addresses that parse
		}
		out = append(out, lb)
	}
	return out, nil
}

func toHCNLoadBalancer(lb LoadBalancer) (*hcn.HostComputeLoadBalancer, error) {
	lb.ID = ""
	var out hcn.HostComputeLoadBalancer
	if err := convertJSON(lbToHCN(lb), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func fromHCNLoadBalancer(in *hcn.HostComputeLoadBalancer) (LoadBalancer, error) {
	var mirror hcnLoadBalancer
	if err := convertJSON(in, &mirror); err != nil {
		return LoadBalancer{}, err
	}
	return lbFromHCN(mirror)
}

func (realHNS) CreateLoadBalancer(lb LoadBalancer) (LoadBalancer, error) {
	h, err := toHCNLoadBalancer(lb)
	if err != nil {
		return LoadBalancer{}, err
	}
	created, err := h.Create()
	if err != nil {
		return LoadBalancer{}, wrapErr("create load balancer "+lb.Key().String(), err)
	}
	return fromHCNLoadBalancer(created)
}

func (realHNS) UpdateLoadBalancer(id string, lb LoadBalancer) (LoadBalancer, error) {
	if err := hcn.ModifyLoadbalancerSupported(); err != nil {
		return LoadBalancer{}, fmt.Errorf("hns update load balancer %s: %w: %w", id, ErrNotImplemented, err)
	}
	h, err := toHCNLoadBalancer(lb)
	if err != nil {
		return LoadBalancer{}, err
	}
	updated, err := h.Update(id)
	if err != nil {
		return LoadBalancer{}, wrapErr("update load balancer "+id, err)
	}
	return fromHCNLoadBalancer(updated)
}

func (realHNS) DeleteLoadBalancer(id string) error {
	lb, err := hcn.GetLoadBalancerByID(id)
	if err != nil {
		return wrapErr("get load balancer "+id, err)
	}
	return wrapErr("delete load balancer "+id, lb.Delete())
}
