package proxy

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// EndpointFilter restricts which endpoint addresses a proxier treats as its
// own, for nodes where two proxies serve two pod networks. The zero value
// allows every address.
type EndpointFilter struct {
	// IncludeCIDRs, when not empty, admits only endpoints inside one of them.
	IncludeCIDRs []netip.Prefix
	// ExcludeCIDRs drops endpoints inside any of them.
	ExcludeCIDRs []netip.Prefix
}

// Active reports whether the filter restricts anything. When it does, a
// service left with no endpoints that pass it is not this proxier's and gets
// no rules at all.
func (f EndpointFilter) Active() bool {
	return len(f.IncludeCIDRs) != 0 || len(f.ExcludeCIDRs) != 0
}

// Allows reports whether ip passes the filter.
func (f EndpointFilter) Allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range f.ExcludeCIDRs {
		if p.Contains(ip) {
			return false
		}
	}
	if len(f.IncludeCIDRs) == 0 {
		return true
	}
	for _, p := range f.IncludeCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Label and annotation names shared by every engine.
const (
	// LabelServiceProxyName marks a service as handled by a named proxy;
	// proxiers skip it unless told that name is their own.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the Endpoints/EndpointSlices of headless services.
	LabelHeadless = v1.IsHeadlessService
	// AnnotationTopologyMode enables topology-aware hints ("Auto").
	AnnotationTopologyMode = v1.AnnotationTopologyMode
	// AnnotationTopologyAwareHints is the deprecated form of AnnotationTopologyMode.
	AnnotationTopologyAwareHints = v1.DeprecatedAnnotationTopologyAwareHints
	// LabelTopologyZone is the node label that names the node's zone.
	LabelTopologyZone = v1.LabelTopologyZone
)
