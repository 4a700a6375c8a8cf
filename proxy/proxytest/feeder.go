package proxytest

import (
	"fmt"
	"slices"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcproxy/svcproxy/proxy"
)

// Handlers is every event handler of a proxy.Provider.
type Handlers interface {
	proxy.ServiceHandler
	proxy.EndpointSliceHandler
	proxy.NodeHandler
}

// Feeder turns a sequence of complete desired states (Objects) into the
// add, update and delete events an informer would deliver, the way a
// Provider sees them in a cluster.
//
// Each Apply compares the new state with the previous one by namespace and
// name: objects that appeared are added, objects that differ (ignoring
// ResourceVersion) are updated with the previous object as old, and objects
// that disappeared are deleted with their last state. Events go out in a
// fixed order: the Node, then Services, then EndpointSlices, each as
// deletes, updates, adds, sorted by key. Handlers receive deep copies with
// a fresh ResourceVersion, so callers may reuse and mutate their objects.
//
// A Feeder is safe for concurrent use, though events are only meaningful in
// one order.
type Feeder struct {
	h Handlers

	mu       sync.Mutex
	services map[string]*v1.Service
	slices   map[string]*discovery.EndpointSlice
	node     *v1.Node
	version  int
	synced   bool
}

// NewFeeder returns a Feeder that delivers events to h, starting from
// the empty state.
func NewFeeder(h Handlers) *Feeder {
	return &Feeder{h: h, services: map[string]*v1.Service{}, slices: map[string]*discovery.EndpointSlice{}}
}

// Apply delivers the events that take the handlers from the previous state
// to objs. A nil entry or two objects with the same namespace and name are
// an error, and then nothing is delivered.
func (f *Feeder) Apply(objs Objects) error {
	svcs := map[string]*v1.Service{}
	for i, s := range objs.Services {
		if s == nil {
			return fmt.Errorf("proxytest: Services[%d] is nil", i)
		}
		k := objectKey(s.Namespace, s.Name)
		if _, dup := svcs[k]; dup {
			return fmt.Errorf("proxytest: duplicate Service %s", k)
		}
		svcs[k] = s
	}
	eps := map[string]*discovery.EndpointSlice{}
	for i, s := range objs.EndpointSlices {
		if s == nil {
			return fmt.Errorf("proxytest: EndpointSlices[%d] is nil", i)
		}
		k := objectKey(s.Namespace, s.Name)
		if _, dup := eps[k]; dup {
			return fmt.Errorf("proxytest: duplicate EndpointSlice %s", k)
		}
		eps[k] = s
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	// Node.
	switch {
	case objs.Node == nil && f.node != nil:
		f.h.OnNodeDelete(f.node)
		f.node = nil
	case objs.Node != nil && f.node == nil:
		f.node = f.stamp(objs.Node).(*v1.Node)
		f.h.OnNodeAdd(f.node)
	case objs.Node != nil && f.node.Name != objs.Node.Name:
		f.h.OnNodeDelete(f.node)
		f.node = f.stamp(objs.Node).(*v1.Node)
		f.h.OnNodeAdd(f.node)
	case objs.Node != nil && !f.same(f.node, objs.Node):
		old := f.node
		f.node = f.stamp(objs.Node).(*v1.Node)
		f.h.OnNodeUpdate(old, f.node)
	}

	diff(f, f.services, svcs, f.h.OnServiceDelete, f.h.OnServiceUpdate, f.h.OnServiceAdd)
	diff(f, f.slices, eps, f.h.OnEndpointSliceDelete, f.h.OnEndpointSliceUpdate, f.h.OnEndpointSliceAdd)
	return nil
}

// diff delivers the events taking cur to want and updates cur.
func diff[T runtime.Object](f *Feeder, cur, want map[string]T, del func(T), upd func(T, T), add func(T)) {
	var dels, upds, adds []string
	for k := range cur {
		if _, ok := want[k]; !ok {
			dels = append(dels, k)
		}
	}
	for k, obj := range want {
		old, ok := cur[k]
		switch {
		case !ok:
			adds = append(adds, k)
		case !f.same(old, obj):
			upds = append(upds, k)
		}
	}
	slices.Sort(dels)
	slices.Sort(upds)
	slices.Sort(adds)
	for _, k := range dels {
		old := cur[k]
		delete(cur, k)
		del(old)
	}
	for _, k := range upds {
		old := cur[k]
		cur[k] = f.stamp(want[k]).(T)
		upd(old, cur[k])
	}
	for _, k := range adds {
		cur[k] = f.stamp(want[k]).(T)
		add(cur[k])
	}
}

// stamp deep-copies obj and gives it the next ResourceVersion.
func (f *Feeder) stamp(obj runtime.Object) runtime.Object {
	c := obj.DeepCopyObject()
	f.version++
	if m, ok := c.(interface{ SetResourceVersion(string) }); ok {
		m.SetResourceVersion(strconv.Itoa(f.version))
	}
	return c
}

// same compares a delivered object with a wanted one, ignoring ResourceVersion.
func (f *Feeder) same(sent, want runtime.Object) bool {
	a := sent.DeepCopyObject()
	b := want.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		if m, ok := o.(interface{ SetResourceVersion(string) }); ok {
			m.SetResourceVersion("")
		}
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// Synced reports the initial lists delivered: OnServiceSynced,
// OnEndpointSlicesSynced and OnNodeSynced, once; later calls do nothing.
func (f *Feeder) Synced() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.synced {
		return
	}
	f.synced = true
	f.h.OnServiceSynced()
	f.h.OnEndpointSlicesSynced()
	f.h.OnNodeSynced()
}
