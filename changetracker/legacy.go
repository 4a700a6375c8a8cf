package changetracker

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// EndpointsToSlices converts a legacy v1.Endpoints object into
// EndpointSlices, for clusters (or object files) without EndpointSlices.
//
// Each subset gives one slice per address family present in it, named
// "<endpoints name>-legacy-<subset index>-ipv4" (or "-ipv6"), so converting
// the same object twice gives the same names. The slices carry the
// Endpoints' labels plus kubernetes.io/service-name. addresses become ready
// (and serving) endpoints, notReadyAddresses endpoints with ready and
// serving false. Addresses that do not parse as IPs are skipped. Ports
// keep their name, number, protocol and appProtocol.
//
// On an update of the Endpoints, convert the old object too and delete the
// slices whose names no longer appear (EndpointsUpdateToSlices does this).
// A nil ep gives nil.
func EndpointsToSlices(ep *v1.Endpoints) []*discovery.EndpointSlice {
	if ep == nil {
		return nil
	}
	var out []*discovery.EndpointSlice
	for i := range ep.Subsets {
		subset := &ep.Subsets[i]
		var byFamily [2][]discovery.Endpoint // IPv4, IPv6
		add := func(addr *v1.EndpointAddress, ready bool) {
			a, ok := parseIP(addr.IP)
			if !ok {
				return
			}
			e := discovery.Endpoint{
				Addresses: []string{a.String()},
				Conditions: discovery.EndpointConditions{
					Ready:   &ready,
					Serving: &ready,
				},
				TargetRef: addr.TargetRef,
			}
			if addr.Hostname != "" {
				h := addr.Hostname
				e.Hostname = &h
			}
			if addr.NodeName != nil {
				n := *addr.NodeName
				e.NodeName = &n
			}
			f := 0
			if a.Is6() {
				f = 1
			}
			byFamily[f] = append(byFamily[f], e)
		}
		for j := range subset.Addresses {
			add(&subset.Addresses[j], true)
		}
		for j := range subset.NotReadyAddresses {
			add(&subset.NotReadyAddresses[j], false)
		}
		var ports []discovery.EndpointPort
		for j := range subset.Ports {
			p := subset.Ports[j]
			ports = append(ports, discovery.EndpointPort{
				Name:        &p.Name,
				Port:        &p.Port,
				Protocol:    &p.Protocol,
				AppProtocol: p.AppProtocol,
			})
		}
		for f, eps := range byFamily {
			if len(eps) == 0 {
				continue
			}
			at, suffix := discovery.AddressTypeIPv4, "-ipv4"
			if f == 1 {
				at, suffix = discovery.AddressTypeIPv6, "-ipv6"
			}
			labels := make(map[string]string, len(ep.Labels)+1)
			for k, v := range ep.Labels {
				labels[k] = v
			}
			labels[discovery.LabelServiceName] = ep.Name
			out = append(out, &discovery.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name:      ep.Name + "-legacy-" + strconv.Itoa(i) + suffix,
					Namespace: ep.Namespace,
					Labels:    labels,
				},
				AddressType: at,
				Endpoints:   eps,
				Ports:       ports,
			})
		}
	}
	return out
}

// EndpointsUpdateToSlices converts an update of a legacy Endpoints object
// (old or new may be nil, for an add or a delete): the slices to add or
// update, and those to delete because their subset or family is gone.
func EndpointsUpdateToSlices(oldEp, newEp *v1.Endpoints) (update, remove []*discovery.EndpointSlice) {
	update = EndpointsToSlices(newEp)
	keep := make(map[string]bool, len(update))
	for _, s := range update {
		keep[s.Name] = true
	}
	for _, s := range EndpointsToSlices(oldEp) {
		if !keep[s.Name] {
			remove = append(remove, s)
		}
	}
	return update, remove
}

// ApplyEndpointsChange hands a change of a legacy Endpoints object to h as
// EndpointSlice events (oldEp nil: an add; newEp nil: a delete). Slices
// (from EndpointsToSlices) present before and after are updates, new ones
// adds, and those that disappeared deletes, in that order. The informer
// glue and the file source feed legacy Endpoints through it.
func ApplyEndpointsChange(h proxy.EndpointSliceHandler, oldEp, newEp *v1.Endpoints) {
	oldSlices := EndpointsToSlices(oldEp)
	byName := make(map[string]*discovery.EndpointSlice, len(oldSlices))
	for _, s := range oldSlices {
		byName[s.Name] = s
	}
	seen := make(map[string]bool, len(oldSlices))
	for _, s := range EndpointsToSlices(newEp) {
		seen[s.Name] = true
		if o, ok := byName[s.Name]; ok {
			h.OnEndpointSliceUpdate(o, s)
		} else {
			h.OnEndpointSliceAdd(s)
		}
	}
	for _, s := range oldSlices {
		if !seen[s.Name] {
			h.OnEndpointSliceDelete(s)
		}
	}
}
