package main

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/svcproxy/svcproxy/proxy"
)

// labelFiltered applies, to objects from a file, the label selector the
// API source puts on its watches (informers.LabelSelector: no headless
// label, and the service-proxy-name label absent, or equal to this proxy's
// name when it has one), so both sources hand the engine the same objects.
// An update that moves an object out of (into) the selection is delivered
// as a delete (add).
type labelFiltered struct {
	proxy.Provider
	sel labels.Selector
}

func (f labelFiltered) keep(l map[string]string) bool { return f.sel.Matches(labels.Set(l)) }

func (f labelFiltered) OnServiceAdd(s *v1.Service) {
	if f.keep(s.Labels) {
		f.Provider.OnServiceAdd(s)
	}
}

func (f labelFiltered) OnServiceUpdate(old, s *v1.Service) {
	switch was, is := f.keep(old.Labels), f.keep(s.Labels); {
	case was && is:
		f.Provider.OnServiceUpdate(old, s)
	case was:
		f.Provider.OnServiceDelete(old)
	case is:
		f.Provider.OnServiceAdd(s)
	}
}

func (f labelFiltered) OnServiceDelete(s *v1.Service) {
	if f.keep(s.Labels) {
		f.Provider.OnServiceDelete(s)
	}
}

func (f labelFiltered) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	if f.keep(s.Labels) {
		f.Provider.OnEndpointSliceAdd(s)
	}
}

func (f labelFiltered) OnEndpointSliceUpdate(old, s *discovery.EndpointSlice) {
	switch was, is := f.keep(old.Labels), f.keep(s.Labels); {
	case was && is:
		f.Provider.OnEndpointSliceUpdate(old, s)
	case was:
		f.Provider.OnEndpointSliceDelete(old)
	case is:
		f.Provider.OnEndpointSliceAdd(s)
	}
}

func (f labelFiltered) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	if f.keep(s.Labels) {
		f.Provider.OnEndpointSliceDelete(s)
	}
}
