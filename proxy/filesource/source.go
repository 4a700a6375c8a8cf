package filesource

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
)

// Handlers is what a Source feeds: every proxy.Provider, a bare
// *changetracker.Tracker, or a fan-out of your own.
type Handlers interface {
	proxy.ServiceHandler
	proxy.EndpointSliceHandler
	proxy.NodeHandler
}

// DefaultInterval is Options.Interval when unset.
const DefaultInterval = 2 * time.Second

// Options configures a Source. Zero values: see fields.
type Options struct {
	// NodeName is this proxy's node: only the Node of that name is handed
	// to the provider (others are ignored). Empty: no Node is handed on.
	NodeName string
	// ServiceProxyName selects objects as the informers do: when empty,
	// objects labelled service.kubernetes.io/service-proxy-name are left
	// out; when set, only objects with that label equal to it are kept.
	// Objects labelled service.kubernetes.io/headless are always left out.
	ServiceProxyName string
	// Interval is how often Run reads the file (0: DefaultInterval).
	Interval time.Duration
	// Clock drives Run's polling; nil means the real clock.
	Clock clock.WithTicker
	// Logger; the zero value discards.
	Logger logr.Logger
}

// Source feeds the objects of one file to a provider and keeps them in
// step with the file. See the package documentation for the guarantees.
type Source struct {
	path     string
	handlers Handlers
	opts     Options
	selector labels.Selector
	// configErr is an invalid Options field; Load and Run return it.
	configErr error

	mu       sync.Mutex
	loaded   bool // a first read succeeded and Synced handlers were called
	hash     [sha256.Size]byte
	lastErrs ParseErrors
	state    map[Key]Object
}

// New returns a Source for the file at path; nothing is read until Load or
// Run. It panics if handlers is nil. An invalid Options.ServiceProxyName
// (not a label value) is reported by Load and Run.
func New(path string, handlers Handlers, opts Options) *Source {
	if handlers == nil {
		panic("filesource.New: nil handlers")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	sel, err := labelSelector(opts.ServiceProxyName)
	return &Source{path: path, handlers: handlers, opts: opts, selector: sel, configErr: err, state: map[Key]Object{}}
}

// labelSelector is the informers' selector (see proxy/informers).
func labelSelector(serviceProxyName string) (labels.Selector, error) {
	var req *labels.Requirement
	var err error
	if serviceProxyName == "" {
		req, err = labels.NewRequirement(proxy.LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		req, err = labels.NewRequirement(proxy.LabelServiceProxyName, selection.In, []string{serviceProxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("filesource: service proxy name %q: %w", serviceProxyName, err)
	}
	noHeadless, err := labels.NewRequirement(proxy.LabelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*req, *noHeadless), nil
}

// Load reads the file and hands the differences from the previous read to
// the provider; after the first successful read it calls the three Synced
// handlers. An unchanged file (same content hash) produces no events.
//
// If the file cannot be read, Load returns that error and changes nothing
// (the provider keeps the last good state). If some documents are bad,
// the others are applied and Load returns ParseErrors; it returns them
// again as long as the file is unchanged.
func (s *Source) Load(ctx context.Context) error {
	_, err := s.load(ctx)
	return err
}

// load reports whether the content changed since the last read.
func (s *Source) load(ctx context.Context) (changed bool, err error) {
	if s.configErr != nil {
		return false, s.configErr
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false, fmt.Errorf("filesource: reading %s: %w", s.path, err)
	}
	sum := sha256.Sum256(data)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded && sum == s.hash {
		return false, s.errsOrNil()
	}
	objs, errs := ParseObjects(data)
	s.lastErrs = s.lastErrs[:0]
	for _, e := range errs {
		var pe *ParseError
		if errors.As(e, &pe) {
			s.lastErrs = append(s.lastErrs, pe)
		}
	}
	next := make(map[Key]Object, len(objs))
	for _, o := range objs {
		if s.wanted(o) {
			next[o.Key] = o
		}
	}
	// A document that became bad but still names its object keeps the
	// object's last good version: a typo must not delete a service.
	for _, pe := range s.lastErrs {
		if pe.Key.Name == "" || errors.Is(pe, ErrDuplicate) {
			continue
		}
		if _, ok := next[pe.Key]; ok {
			continue
		}
		if o, had := s.state[pe.Key]; had {
			next[pe.Key] = o
		}
	}
	s.apply(s.state, next)
	s.state = next
	s.hash = sum
	if !s.loaded {
		s.loaded = true
		s.handlers.OnServiceSynced()
		s.handlers.OnEndpointSlicesSynced()
		s.handlers.OnNodeSynced()
	}
	s.opts.Logger.V(2).Info("Loaded objects file", "path", s.path, "objects", len(next), "skipped", len(s.lastErrs))
	return true, s.errsOrNil()
}

func (s *Source) errsOrNil() error {
	if len(s.lastErrs) == 0 {
		return nil
	}
	return append(ParseErrors(nil), s.lastErrs...)
}

// wanted applies the node name and the label selector.
func (s *Source) wanted(o Object) bool {
	if o.Key.Kind == KindNode {
		return s.opts.NodeName != "" && o.Key.Name == s.opts.NodeName
	}
	type labelled interface{ GetLabels() map[string]string }
	l, ok := o.Object.(labelled)
	return ok && s.selector.Matches(labels.Set(l.GetLabels()))
}

// kindOrder is the order in which adds and updates are delivered; deletes
// go in the reverse order.
var kindOrder = []Kind{KindNode, KindService, KindEndpointSlice, KindEndpoints}

func sortedKeys(m map[Key]Object, kind Kind) []Key {
	var keys []Key
	for k := range m {
		if k.Kind == kind {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Namespace != keys[j].Namespace {
			return keys[i].Namespace < keys[j].Namespace
		}
		return keys[i].Name < keys[j].Name
	})
	return keys
}

// apply hands the differences between prev and next to the handlers.
func (s *Source) apply(prev, next map[Key]Object) {
	for _, kind := range kindOrder {
		for _, k := range sortedKeys(next, kind) {
			n := next[k]
			o, had := prev[k]
			switch {
			case !had:
				s.deliver(nil, n.Object)
			case !equality.Semantic.DeepEqual(o.Object, n.Object):
				s.deliver(o.Object, n.Object)
			}
		}
	}
	for i := len(kindOrder) - 1; i >= 0; i-- {
		for _, k := range sortedKeys(prev, kindOrder[i]) {
			if _, still := next[k]; !still {
				s.deliver(prev[k].Object, nil)
			}
		}
	}
}

// deliver sends one add (old nil), update or delete (new nil).
func (s *Source) deliver(oldObj, newObj any) {
	h := s.handlers
	switch n := newObj.(type) {
	case *v1.Service:
		if oldObj == nil {
			h.OnServiceAdd(n)
		} else {
			h.OnServiceUpdate(oldObj.(*v1.Service), n)
		}
	case *discovery.EndpointSlice:
		if oldObj == nil {
			h.OnEndpointSliceAdd(n)
		} else {
			h.OnEndpointSliceUpdate(oldObj.(*discovery.EndpointSlice), n)
		}
	case *v1.Endpoints:
		o, _ := oldObj.(*v1.Endpoints)
		changetracker.ApplyEndpointsChange(h, o, n)
	case *v1.Node:
		if oldObj == nil {
			h.OnNodeAdd(n)
		} else {
			h.OnNodeUpdate(oldObj.(*v1.Node), n)
		}
	case nil:
		switch o := oldObj.(type) {
		case *v1.Service:
			h.OnServiceDelete(o)
		case *discovery.EndpointSlice:
			h.OnEndpointSliceDelete(o)
		case *v1.Endpoints:
			changetracker.ApplyEndpointsChange(h, o, nil)
		case *v1.Node:
			h.OnNodeDelete(o)
		}
	}
}

// Objects returns the objects currently handed to the provider, sorted by
// kind order then namespace and name (for dry runs and debugging).
func (s *Source) Objects() []Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Object
	for _, kind := range kindOrder {
		for _, k := range sortedKeys(s.state, kind) {
			out = append(out, s.state[k])
		}
	}
	return out
}

// Run loads the file, then reads it again every Interval and applies what
// changed, until ctx ends; then it returns nil. Read failures (a missing
// file while it is being replaced, say) keep the last good state and are
// logged when they start and when they stop; bad documents are logged
// each time the content changes.
//
// Run returns an error at once only when the Options are invalid.
func (s *Source) Run(ctx context.Context) error {
	if s.configErr != nil {
		return s.configErr
	}
	failing := false
	poll := func() {
		changed, err := s.load(ctx)
		var perrs ParseErrors
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &perrs):
			failing = false
			if changed {
				for _, pe := range perrs {
					s.opts.Logger.Error(pe, "Skipped a bad object", "path", s.path)
				}
			}
		case err != nil:
			if !failing {
				s.opts.Logger.Error(err, "Cannot read objects file; keeping the last good state", "path", s.path)
			}
			failing = true
		default:
			if failing {
				s.opts.Logger.Info("Objects file readable again", "path", s.path)
			}
			failing = false
		}
	}
	poll()
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			poll()
		}
	}
}
