package proxy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// NewDualStack returns a Provider that hands every event to both an IPv4 and
// an IPv6 provider (each keeps only its own family), syncs both, and runs
// both. It refuses, with an error, a nil provider (a typed nil pointer
// included: it would panic at the first event), and a provider whose
// IPFamily method (every svcproxy engine has one) names the wrong family,
// which catches two engines of one family and swapped arguments. For a
// single-stack node use the one provider directly.
func NewDualStack(ipv4, ipv6 Provider) (Provider, error) {
	for _, c := range []struct {
		p    Provider
		want v1.IPFamily
		arg  string
	}{{ipv4, v1.IPv4Protocol, "ipv4"}, {ipv6, v1.IPv6Protocol, "ipv6"}} {
		if isNil(c.p) {
			return nil, fmt.Errorf("proxy.NewDualStack: the %s provider is nil", c.arg)
		}
		if f, ok := c.p.(interface{ IPFamily() v1.IPFamily }); ok && f.IPFamily() != c.want {
			return nil, fmt.Errorf("proxy.NewDualStack: the %s provider is an %s proxier (two of one family, or the arguments swapped?)", c.arg, f.IPFamily())
		}
	}
	return &dualStack{providers: [2]Provider{ipv4, ipv6}}, nil
}

// isNil reports whether p is nil or an interface holding a nil pointer,
// map, slice, func or channel.
func isNil(p Provider) bool {
	if p == nil {
		return true
	}
	switch v := reflect.ValueOf(p); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// dualStack fans out to one Provider per IP family. Like kube-proxy's
// metaproxier, it holds no state of its own, so it is as safe for
// concurrent use as the providers it wraps.
type dualStack struct {
	providers [2]Provider
}

func (d *dualStack) OnServiceAdd(s *v1.Service) {
	for _, p := range d.providers {
		p.OnServiceAdd(s)
	}
}

func (d *dualStack) OnServiceUpdate(old, s *v1.Service) {
	for _, p := range d.providers {
		p.OnServiceUpdate(old, s)
	}
}

func (d *dualStack) OnServiceDelete(s *v1.Service) {
	for _, p := range d.providers {
		p.OnServiceDelete(s)
	}
}

func (d *dualStack) OnServiceSynced() {
	for _, p := range d.providers {
		p.OnServiceSynced()
	}
}

func (d *dualStack) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	for _, p := range d.providers {
		p.OnEndpointSliceAdd(s)
	}
}

func (d *dualStack) OnEndpointSliceUpdate(old, s *discovery.EndpointSlice) {
	for _, p := range d.providers {
		p.OnEndpointSliceUpdate(old, s)
	}
}

func (d *dualStack) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	for _, p := range d.providers {
		p.OnEndpointSliceDelete(s)
	}
}

func (d *dualStack) OnEndpointSlicesSynced() {
	for _, p := range d.providers {
		p.OnEndpointSlicesSynced()
	}
}

func (d *dualStack) OnNodeAdd(n *v1.Node) {
	for _, p := range d.providers {
		p.OnNodeAdd(n)
	}
}

func (d *dualStack) OnNodeUpdate(old, n *v1.Node) {
	for _, p := range d.providers {
		p.OnNodeUpdate(old, n)
	}
}

func (d *dualStack) OnNodeDelete(n *v1.Node) {
	for _, p := range d.providers {
		p.OnNodeDelete(n)
	}
}

func (d *dualStack) OnNodeSynced() {
	for _, p := range d.providers {
		p.OnNodeSynced()
	}
}

// Sync syncs the IPv4 provider, then the IPv6 one (the second runs even if
// the first failed) and returns both errors joined (errors.Is sees each,
// e.g. ErrNotSynced).
func (d *dualStack) Sync(ctx context.Context) error {
	var errs [2]error
	for i, p := range d.providers {
		errs[i] = p.Sync(ctx)
	}
	return errors.Join(errs[0], errs[1])
}

// Run runs both providers concurrently until ctx ends. If one returns
// before ctx ends (a provider gives up only on an unrecoverable error), the
// other is stopped too. The result joins both providers' errors.
func (d *dualStack) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errs [2]error
	var wg sync.WaitGroup
	for i, p := range d.providers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			errs[i] = p.Run(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs[0], errs[1])
}
