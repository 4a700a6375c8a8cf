package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/filesource"
	"github.com/svcproxy/svcproxy/proxy/informers"
)

// source is where Services, EndpointSlices and the Node come from.
type source interface {
	// node returns this node's Node object, or nil when there is none.
	node(ctx context.Context) (*v1.Node, error)
	// run feeds h until ctx ends.
	run(ctx context.Context, h proxy.Provider) error
	// load feeds h the current objects once, reports them synced, and returns.
	load(ctx context.Context, h proxy.Provider) error
}

// newSource returns the file source for --objects-file, else the API
// server source, and the node name: --hostname-override, else, with an
// objects file holding exactly one Node, that Node's name (so the file
// alone describes a node), else the host name.
func newSource(o *options, log logr.Logger) (source, string, error) {
	if o.objectsFile != "" {
		s, err := newFileSource(o.objectsFile, log)
		if err != nil {
			return nil, "", err
		}
		s.serviceProxyName = o.serviceProxyName
		name := o.config.HostnameOverride
		if name == "" && len(s.nodes) == 1 {
			name = s.nodes[0].Name
			log.Info("Using the objects file's only Node as this node", "node", name)
		}
		if name, err = nodeNameFor(name); err != nil {
			return nil, "", err
		}
		s.nodeName = name
		for _, n := range s.nodes {
			if n.Name == name {
				s.nodeObj = n
			}
		}
		if s.nodeObj == nil {
			s.log.Info("The objects file has no Node for this node; its addresses and topology labels are unknown", "node", name)
		}
		return s, name, nil
	}
	name, err := nodeNameFor(o.config.HostnameOverride)
	if err != nil {
		return nil, "", err
	}
	client, _, err := newClient(o.master, o.config.ClientConnection)
	if err != nil {
		return nil, "", err
	}
	return &apiSource{
		client:           client,
		nodeName:         name,
		resync:           o.config.ConfigSyncPeriod.Duration,
		serviceProxyName: o.serviceProxyName,
		log:              log.WithName("informers"),
	}, name, nil
}

// fileSource reads the objects file (re-read when it changes).
type fileSource struct {
	path     string
	nodeName string
	log      logr.Logger
	nodes    []*v1.Node
	nodeObj  *v1.Node
	// serviceProxyName selects objects as the API source's watches do.
	serviceProxyName string

	mu      sync.Mutex
	running *filesource.Source // set by run, for stats
}

// stats are the running source's counts (zero before run).
func (s *fileSource) stats() filesource.Stats {
	s.mu.Lock()
	r := s.running
	s.mu.Unlock()
	if r == nil {
		return filesource.Stats{}
	}
	return r.Stats()
}

// registerMetrics exports the objects file's counters: objects skipped as
// bad, and reads refused as a whole (the last good state kept).
func (s *fileSource) registerMetrics(reg prometheus.Registerer) error {
	return errors.Join(
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "svcproxy_objects_file_skipped_objects_total",
			Help: "Objects of --objects-file skipped as invalid (each keeps its last good version, if any).",
		}, func() float64 { return float64(s.stats().SkippedObjects) })),
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "svcproxy_objects_file_rejected_reads_total",
			Help: "Reads of --objects-file refused as a whole (empty, binary, cut off or too large); the last good state was kept.",
		}, func() float64 { return float64(s.stats().RejectedReads) })),
	)
}

// fileReloadInterval is how often a running proxy checks the objects file
// for changes.
const fileReloadInterval = 2 * time.Second

// newFileSource parses the file once up front, so a malformed file is
// refused at start with every bad document named; later reloads log and
// skip bad documents instead (the proxy keeps running).
func newFileSource(path string, log logr.Logger) (*fileSource, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--objects-file: %w", err)
	}
	objs, errs := filesource.ParseObjects(data)
	if len(errs) > 0 {
		return nil, fmt.Errorf("--objects-file %s: %w", path, errors.Join(errs...))
	}
	s := &fileSource{path: path, log: log.WithName("objects-file")}
	for _, obj := range objs {
		if n, ok := obj.Object.(*v1.Node); ok {
			s.nodes = append(s.nodes, n)
		}
	}
	return s, nil
}

func (s *fileSource) node(context.Context) (*v1.Node, error) { return s.nodeObj, nil }

func (s *fileSource) options() filesource.Options {
	return filesource.Options{NodeName: s.nodeName, ServiceProxyName: s.serviceProxyName, Interval: fileReloadInterval, Logger: s.log}
}

// run feeds h and re-reads the file every fileReloadInterval; a bad
// document in a later version of the file is logged and skipped, the rest
// applies.
func (s *fileSource) run(ctx context.Context, h proxy.Provider) error {
	src := filesource.New(s.path, h, s.options())
	s.mu.Lock()
	s.running = src
	s.mu.Unlock()
	return src.Run(ctx)
}

func (s *fileSource) load(ctx context.Context, h proxy.Provider) error {
	return filesource.New(s.path, h, s.options()).Load(ctx)
}

// apiSource watches the API server through client-go informers.
type apiSource struct {
	client           kubernetes.Interface
	nodeName         string
	resync           time.Duration
	serviceProxyName string
	log              logr.Logger
}

// nodeLookupTimeout bounds the wait for the Node at start; after it the
// proxy runs without node IPs (as kube-proxy does, with a warning).
const nodeLookupTimeout = 30 * time.Second

// node fetches this node's Node, retrying (bounded) while the API server is
// unreachable. A missing Node is not an error: nil is returned.
func (s *apiSource) node(ctx context.Context) (*v1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeLookupTimeout)
	defer cancel()
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		n, err := s.client.CoreV1().Nodes().Get(ctx, s.nodeName, metav1.GetOptions{})
		if err == nil {
			return n, nil
		}
		if apierrors.IsNotFound(err) {
			s.log.Info("No Node object for this node yet; node IPs and topology labels are unknown until it appears")
			return nil, nil
		}
		s.log.Info("Cannot reach the API server to read this node; retrying", "attempt", attempt, "err", err.Error())
		select {
		case <-ctx.Done():
			s.log.Info("Giving up waiting for this node's Node object; continuing without node IPs", "waited", nodeLookupTimeout)
			return nil, nil
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

// start registers h with fresh informers and starts them; they stop when
// ctx ends.
func (s *apiSource) start(ctx context.Context, h proxy.Provider) (wait func(), err error) {
	opts := informers.Options{ServiceProxyName: s.serviceProxyName, Stop: ctx.Done(), Logger: s.log}
	factory, err := informers.NewInformerFactory(s.client, s.resync, opts)
	if err != nil {
		return nil, err
	}
	nodeFactory, err := informers.NewNodeInformerFactory(s.client, s.resync, s.nodeName)
	if err != nil {
		return nil, err
	}
	if err := informers.Register(factory, nodeFactory, h, opts); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	return func() {
		<-ctx.Done()
		factory.Shutdown()
		nodeFactory.Shutdown()
	}, nil
}

// run starts the informers and feeds h until ctx ends. Informers retry a
// failing API server on their own (client-go logs each failure); the
// Synced handlers are called only once the initial lists arrived, so
// nothing is programmed, and /healthz fails, until then.
func (s *apiSource) run(ctx context.Context, h proxy.Provider) error {
	wait, err := s.start(ctx, h)
	if err != nil {
		return err
	}
	wait()
	return nil
}

// load runs the informers until h has its initial lists, then stops them.
func (s *apiSource) load(ctx context.Context, h proxy.Provider) error {
	ctx, cancel := context.WithCancel(ctx)
	wait, err := s.start(ctx, h)
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		cancel()
		wait()
	}()
	// The Synced handlers run once the initial lists are delivered; poll
	// the provider (bounded by ctx) until it reports them.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if isSynced(h) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("API server: the initial lists did not arrive: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// nodeAddresses picks the node IPs as kube-proxy does: bindAddress when it
// is a specific address, else the Node's InternalIPs then ExternalIPs
// (primary first, at most one per family), else 127.0.0.1 with a warning.
func nodeAddresses(node *v1.Node, bindAddress string, log logr.Logger) []netip.Addr {
	if a, err := netip.ParseAddr(bindAddress); err == nil && !a.IsUnspecified() {
		return []netip.Addr{a.Unmap()}
	}
	var out []netip.Addr
	seen := map[bool]bool{}
	if node != nil {
		for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
			for _, addr := range node.Status.Addresses {
				if addr.Type != typ {
					continue
				}
				ip, err := netip.ParseAddr(addr.Address)
				if err != nil {
					log.Info("Ignoring an unparsable node address", "address", addr.Address)
					continue
				}
				ip = ip.Unmap()
				if !seen[ip.Is4()] {
					seen[ip.Is4()] = true
					out = append(out, ip)
				}
			}
		}
	}
	if len(out) == 0 {
		log.Info("Can't determine this node's IP, assuming 127.0.0.1; if this is incorrect, set --bind-address or give the Node an InternalIP")
		out = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	return out
}

// isSynced reports whether p has had both initial lists. Engines embed a
// changetracker.Tracker, whose Synced says so without touching anything;
// for others, Sync is asked (a dry run's fakes refuse the apply itself).
func isSynced(p proxy.Provider) bool {
	if s, ok := p.(interface{ Synced() bool }); ok {
		return s.Synced()
	}
	return !errors.Is(p.Sync(context.Background()), proxy.ErrNotSynced)
}
