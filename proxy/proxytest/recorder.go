package proxytest

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// Recorder is a Handlers that records every event as a line such as
// "service update conformance/web rv 1->4", for tests of event sources.
type Recorder struct {
	mu     sync.Mutex
	events []string
}

var _ Handlers = (*Recorder)(nil)

// Events returns the recorded events in order and forgets them.
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func (r *Recorder) add(kind, op, key, rv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := kind + " " + op
	if key != "" {
		line += " " + key
	}
	if rv != "" {
		line += " rv " + rv
	}
	r.events = append(r.events, line)
}

func (r *Recorder) OnServiceAdd(s *v1.Service) {
	r.add("service", "add", objectKey(s.Namespace, s.Name), s.ResourceVersion)
}
func (r *Recorder) OnServiceUpdate(o, s *v1.Service) {
	r.add("service", "update", objectKey(s.Namespace, s.Name), o.ResourceVersion+"->"+s.ResourceVersion)
}
func (r *Recorder) OnServiceDelete(s *v1.Service) {
	r.add("service", "delete", objectKey(s.Namespace, s.Name), s.ResourceVersion)
}
func (r *Recorder) OnServiceSynced() { r.add("service", "synced", "", "") }
func (r *Recorder) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	r.add("endpointslice", "add", objectKey(s.Namespace, s.Name), s.ResourceVersion)
}
func (r *Recorder) OnEndpointSliceUpdate(o, s *discovery.EndpointSlice) {
	r.add("endpointslice", "update", objectKey(s.Namespace, s.Name), o.ResourceVersion+"->"+s.ResourceVersion)
}
func (r *Recorder) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	r.add("endpointslice", "delete", objectKey(s.Namespace, s.Name), s.ResourceVersion)
}
func (r *Recorder) OnEndpointSlicesSynced() { r.add("endpointslice", "synced", "", "") }
func (r *Recorder) OnNodeAdd(n *v1.Node)    { r.add("node", "add", n.Name, n.ResourceVersion) }
func (r *Recorder) OnNodeUpdate(o, n *v1.Node) {
	r.add("node", "update", n.Name, o.ResourceVersion+"->"+n.ResourceVersion)
}
func (r *Recorder) OnNodeDelete(n *v1.Node) { r.add("node", "delete", n.Name, n.ResourceVersion) }
func (r *Recorder) OnNodeSynced()           { r.add("node", "synced", "", "") }
