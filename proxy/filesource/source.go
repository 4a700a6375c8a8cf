package filesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

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
	// MaxBytes is the largest file read (0: DefaultMaxBytes); a larger
	// one is refused with ErrTooLarge and the last good state is kept.
	MaxBytes int64
}

// DefaultMaxBytes is the default Options.MaxBytes: 32 MiB, several times
// the manifests of 10,000 services with 10 endpoints each.
const DefaultMaxBytes = 32 << 20

// Errors of a read refused as a whole (errors.Is-able); the provider keeps
// the last good state.
var (
	// ErrTooLarge: the file is over Options.MaxBytes.
	ErrTooLarge = errors.New("objects file too large")
	// ErrNotWhole: the file does not parse as a whole: it is empty, not
	// text, or has a document that is not valid YAML/JSON or does not name
	// its object — what a half-written file looks like. Replace the file
	// by renaming a complete one over it to avoid this.
	ErrNotWhole = errors.New("objects file does not parse as a whole")
)

// Stats counts what a Source did; see Source.Stats.
type Stats struct {
	// Reads is how many times the file's content was read and parsed.
	Reads int
	// RejectedReads is how many of them were refused as a whole
	// (ErrTooLarge, ErrNotWhole), keeping the last good state.
	RejectedReads int
	// SkippedObjects is how many bad objects were skipped, summed over
	// the reads (a bad object in an unchanged file counts once).
	SkippedObjects int
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
	// rejected is the content last refused as a whole, and why.
	rejected    [sha256.Size]byte
	rejectedErr error
	stats       Stats
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
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
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
	data, err := readLimited(s.path, s.opts.MaxBytes)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			s.mu.Lock()
			s.stats.RejectedReads++
			s.mu.Unlock()
		}
		return false, fmt.Errorf("filesource: reading %s: %w", s.path, err)
	}
	sum := sha256.Sum256(data)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded && sum == s.hash {
		return false, s.errsOrNil()
	}
	if s.rejectedErr != nil && sum == s.rejected {
		return false, s.rejectedErr
	}
	s.stats.Reads++
	objs, errs := ParseObjects(data)
	var perrs ParseErrors
	for _, e := range errs {
		var pe *ParseError
		if errors.As(e, &pe) {
			perrs = append(perrs, pe)
		}
	}
	if err := wholeFileError(data, objs, perrs); err != nil {
		s.stats.RejectedReads++
		s.rejected, s.rejectedErr = sum, fmt.Errorf("filesource: %s: %w", s.path, err)
		return true, s.rejectedErr
	}
	s.rejectedErr = nil
	s.lastErrs = perrs
	s.stats.SkippedObjects += len(perrs)
	next := make(map[Key]Object, len(objs))
	for _, o := range objs {
		if s.wanted(o) {
			next[o.Key] = o
		}
	}
	// A document that became bad but still names its object keeps the
	// object's last good version: a typo must not delete a service.
	for _, pe := range s.lastErrs {
		if errors.Is(pe, ErrDuplicate) {
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

// Stats returns the counts so far.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// readLimited reads the file at path, refusing one over max bytes.
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: over %d bytes (Options.MaxBytes)", ErrTooLarge, max)
	}
	return data, nil
}

// wholeFileError says why a read must be refused as a whole, or nil: an
// empty file, a binary one, or a document that is not valid YAML/JSON or
// cannot name its object. Such a file is what an editor's non-atomic save
// or a copy cut short leaves behind, and applying it would delete or
// change services that the complete file keeps.
func wholeFileError(data []byte, objs []Object, perrs ParseErrors) error {
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return fmt.Errorf("%w: not text (a NUL byte or invalid UTF-8)", ErrNotWhole)
	}
	if len(objs) == 0 && len(perrs) == 0 {
		if len(bytes.TrimSpace(data)) == 0 || !hasListDocument(data) {
			return fmt.Errorf("%w: no documents (to remove every object, write an empty List: \"apiVersion: v1\\nkind: List\\nitems: []\")", ErrNotWhole)
		}
	}
	for _, pe := range perrs {
		if errors.Is(pe, ErrSyntax) || pe.Key.Name == "" {
			return fmt.Errorf("%w: %v", ErrNotWhole, pe)
		}
	}
	return nil
}

// listDocument matches a List's kind line, in YAML or JSON, or a JSON array.
var listDocument = regexp.MustCompile(`(?m)^\s*(kind:\s*["']?\w*List\b|\[)|"kind"\s*:\s*"\w*List"`)

// hasListDocument reports whether data declares a List (an explicitly
// empty file of objects).
func hasListDocument(data []byte) bool {
	return listDocument.Match(data)
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
					s.opts.Logger.Error(pe, "Skipped a bad object; it keeps its last good version, if any", "path", s.path)
				}
			}
		case errors.Is(err, ErrNotWhole) || errors.Is(err, ErrTooLarge):
			if changed || !failing {
				s.opts.Logger.Error(err, "Objects file refused as a whole; keeping the last good state (replace the file by renaming a complete one over it)", "path", s.path)
			}
			failing = true
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
