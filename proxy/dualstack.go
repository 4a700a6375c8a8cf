package proxy

import (
	"context"
	"errors"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// NewDualStack returns a Provider that hands every event to both an IPv4 and
// an IPv6 provider (each keeps only its own family), syncs both, and runs
// both. If one of them is nil the other is returned as is; both nil gives nil.
func NewDualStack(ipv4, ipv6 Provider) Provider {
	switch {
	case ipv4 == nil:
		return ipv6
	case ipv6 == nil:
		return ipv4
	}
	return &dualStack{providers: [2]Provider{ipv4, ipv6}}
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
