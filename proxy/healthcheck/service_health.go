package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// ProxyHealthChecker is what the service health server asks about the
// proxy itself; *ProxyHealthServer implements it.
type ProxyHealthChecker interface {
	IsHealthy() bool
}

// ServiceHealthConfig configures a ServiceHealthServer. Zero values: see fields.
type ServiceHealthConfig struct {
	// NodeName appears in logs and errors.
	NodeName string
	// NodeIPs are the addresses each health-check node port listens on
	// (kube-proxy: the node IPs matching nodePortAddresses). Empty means
	// all addresses (one wildcard listener per port).
	NodeIPs []netip.Addr
	// ProxyHealth, when set, makes every service answer 503 while the
	// proxy is unhealthy (its serviceProxyHealthy field); nil counts the
	// proxy as healthy.
	ProxyHealth ProxyHealthChecker
	// Listener; nil means StdListener.
	Listener Listener
	// Metrics counts ports that could not be opened; nil counts nothing.
	Metrics *metrics.Metrics
	// Logger; the zero value discards.
	Logger logr.Logger
}

// ListenError says that the health-check node port of one service could not
// be opened. The other services are unaffected; the port is tried again on
// the next SyncServices.
type ListenError struct {
	Service types.NamespacedName
	Port    uint16
	Addr    string
	Err     error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("healthcheck: service %s: cannot listen on health-check node port %s: %v", e.Service, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// ServiceHealthServer serves, on the healthCheckNodePort of every service
// with externalTrafficPolicy Local, whether this node has local endpoints
// for it: 200 with a JSON body when it has some and the proxy is healthy,
// else 503, exactly as kube-proxy does. Load balancers use it to send
// traffic only to nodes that can serve it.
//
// Engines call SyncServices and SyncEndpoints after each sync (from any
// goroutine; calls are serialised). Close stops every listener.
type ServiceHealthServer struct {
	cfg ServiceHealthConfig

	mu        sync.RWMutex
	services  map[types.NamespacedName]*hcInstance
	endpoints map[types.NamespacedName]int
	closed    bool
	// The last maps each view (IP family, or anyFamily) gave.
	familyServices  map[v1.IPFamily]map[types.NamespacedName]uint16
	familyEndpoints map[v1.IPFamily]map[types.NamespacedName]int
}

// hcInstance is one service's open health-check port.
type hcInstance struct {
	name      types.NamespacedName
	port      uint16
	servers   []*http.Server
	listeners []net.Listener
	addrs     []net.Addr
}

// NewServiceHealthServer returns a server with no ports open.
func NewServiceHealthServer(cfg ServiceHealthConfig) *ServiceHealthServer {
	if cfg.Listener == nil {
		cfg.Listener = StdListener{}
	}
	return &ServiceHealthServer{
		cfg:             cfg,
		services:        map[types.NamespacedName]*hcInstance{},
		endpoints:       map[types.NamespacedName]int{},
		familyServices:  map[v1.IPFamily]map[types.NamespacedName]uint16{},
		familyEndpoints: map[v1.IPFamily]map[types.NamespacedName]int{},
	}
}

// SyncServices makes newServices (service → healthCheckNodePort) the set of
// open ports: ports of services no longer listed, or whose port changed,
// are closed; new ones are opened; unchanged ones are left alone.
//
// A port that cannot be opened is logged, counted and reported in the
// returned error (a join of *ListenError, one per failed service); every
// other service is still served, and the failed one is retried on the next
// call. Engines should log this error rather than fail their sync.
//
// With several engines (one per IP family) sharing the server, give each
// its own view with Family instead.
func (s *ServiceHealthServer) SyncServices(newServices map[types.NamespacedName]uint16) error {
	return s.syncServices(anyFamily, newServices)
}

// anyFamily is the view used by the server's own Sync methods.
const anyFamily v1.IPFamily = ""

func (s *ServiceHealthServer) syncServices(family v1.IPFamily, newServices map[types.NamespacedName]uint16) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("healthcheck: service health server is closed")
	}
	s.familyServices[family] = maps.Clone(newServices)
	wanted := s.mergedServices()
	for name, inst := range s.services {
		if port, ok := wanted[name]; !ok || port != inst.port {
			s.cfg.Logger.V(2).Info("Closing health check", "service", name, "port", inst.port)
			inst.close()
			delete(s.services, name)
		}
	}
	var errs []error
	for _, name := range sortedNames(wanted) {
		port := wanted[name]
		if s.services[name] != nil {
			continue
		}
		if port == 0 {
			errs = append(errs, s.listenFailed(&ListenError{Service: name, Port: port, Addr: ":0", Err: errors.New("port 0 is not a health-check node port")}))
			continue
		}
		s.cfg.Logger.V(2).Info("Opening health check", "service", name, "port", port)
		inst, err := s.open(name, port)
		if err != nil {
			errs = append(errs, s.listenFailed(err))
			continue
		}
		s.services[name] = inst
	}
	return errors.Join(errs...)
}

// mergedServices is the union of every view's services; if two views
// disagree on a service's port (briefly, while a change reaches one engine
// before the other), the lower port wins until they agree.
func (s *ServiceHealthServer) mergedServices() map[types.NamespacedName]uint16 {
	out := map[types.NamespacedName]uint16{}
	for _, m := range s.familyServices {
		for name, port := range m {
			if cur, ok := out[name]; !ok || port < cur {
				out[name] = port
			}
		}
	}
	return out
}

func sortedNames(m map[types.NamespacedName]uint16) []types.NamespacedName {
	names := make([]types.NamespacedName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	return names
}

func (s *ServiceHealthServer) listenFailed(err *ListenError) error {
	s.cfg.Logger.Error(err.Err, "Failed to open health check", "node", s.cfg.NodeName, "service", err.Service, "address", err.Addr)
	s.cfg.Metrics.IncServiceHealthCheckListenFailures()
	return err
}

// open listens on every node IP for one service; all or nothing.
func (s *ServiceHealthServer) open(name types.NamespacedName, port uint16) (*hcInstance, *ListenError) {
	inst := &hcInstance{name: name, port: port}
	addrs := s.listenAddrs(port)
	for _, addr := range addrs {
		ln, err := s.cfg.Listener.Listen(context.Background(), addr)
		if err != nil {
			inst.close()
			return nil, &ListenError{Service: name, Port: port, Addr: addr, Err: err}
		}
		srv := newHTTPServer(serviceHandler{name: name, s: s})
		inst.servers = append(inst.servers, srv)
		inst.listeners = append(inst.listeners, ln)
		inst.addrs = append(inst.addrs, ln.Addr())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error(err, "Health check server stopped", "service", name, "address", ln.Addr().String())
			}
		}()
	}
	return inst, nil
}

func (s *ServiceHealthServer) listenAddrs(port uint16) []string {
	p := strconv.Itoa(int(port))
	if len(s.cfg.NodeIPs) == 0 {
		return []string{net.JoinHostPort("", p)}
	}
	out := make([]string, 0, len(s.cfg.NodeIPs))
	for _, ip := range s.cfg.NodeIPs {
		out = append(out, net.JoinHostPort(ip.String(), p))
	}
	return out
}

// close stops serving and frees the ports at once: the listeners are
// closed here too, because a Serve goroutine that has not started yet
// would only close its listener later, and the port may be reused by
// another service in the same SyncServices.
func (inst *hcInstance) close() {
	for _, srv := range inst.servers {
		_ = srv.Close()
	}
	for _, ln := range inst.listeners {
		_ = ln.Close()
	}
	inst.servers, inst.listeners = nil, nil
}

// SyncEndpoints sets, for each service, the number of ready endpoints on
// this node; services not in the map have none. Counts may be given before
// the service's port is open; they apply as soon as it is.
func (s *ServiceHealthServer) SyncEndpoints(newEndpoints map[types.NamespacedName]int) error {
	s.syncEndpoints(anyFamily, newEndpoints)
	return nil
}

func (s *ServiceHealthServer) syncEndpoints(family v1.IPFamily, newEndpoints map[types.NamespacedName]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.familyEndpoints[family] = maps.Clone(newEndpoints)
	// A dual-stack pod is a local endpoint in each family: the largest
	// count, not the sum, is the number of local pods.
	counts := map[types.NamespacedName]int{}
	for _, m := range s.familyEndpoints {
		for name, n := range m {
			if n > counts[name] {
				counts[name] = n
			}
		}
	}
	s.endpoints = counts
}

// Family returns the view of the server for the engine of one IP family.
// Each view's SyncServices and SyncEndpoints replace only that view's
// part: the server serves the union of the views' services, and for each
// the largest local endpoint count any view reports. Engines of a
// dual-stack proxy each take their own view of one shared server (two
// servers would fight over the same ports).
func (s *ServiceHealthServer) Family(family v1.IPFamily) *FamilyView {
	return &FamilyView{s: s, family: family}
}

// FamilyView is one IP family's view of a ServiceHealthServer; it has the
// same SyncServices and SyncEndpoints methods.
type FamilyView struct {
	s      *ServiceHealthServer
	family v1.IPFamily
}

// SyncServices is ServiceHealthServer.SyncServices for this view.
func (v *FamilyView) SyncServices(newServices map[types.NamespacedName]uint16) error {
	return v.s.syncServices(v.family, newServices)
}

// SyncEndpoints is ServiceHealthServer.SyncEndpoints for this view.
func (v *FamilyView) SyncEndpoints(newEndpoints map[types.NamespacedName]int) error {
	v.s.syncEndpoints(v.family, newEndpoints)
	return nil
}

// Addrs returns the addresses the health check of service listens on,
// or nil when it has none open.
func (s *ServiceHealthServer) Addrs(service types.NamespacedName) []net.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if inst := s.services[service]; inst != nil {
		return append([]net.Addr(nil), inst.addrs...)
	}
	return nil
}

// Close closes every health-check port. Later SyncServices calls fail.
func (s *ServiceHealthServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, inst := range s.services {
		inst.close()
		delete(s.services, name)
	}
	s.closed = true
	return nil
}

// ServiceHealth is the JSON body of a service health check, the same
// document kube-proxy serves.
type ServiceHealth struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

type serviceHandler struct {
	name types.NamespacedName
	s    *ServiceHealthServer
}

func (h serviceHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.s.mu.RLock()
	_, open := h.s.services[h.name]
	count := h.s.endpoints[h.name]
	h.s.mu.RUnlock()
	if !open {
		// The port is being closed; tell the load balancer not to use us.
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	proxyHealthy := h.s.cfg.ProxyHealth == nil || h.s.cfg.ProxyHealth.IsHealthy()

	var body ServiceHealth
	body.Service.Namespace = h.name.Namespace
	body.Service.Name = h.name.Name
	body.LocalEndpoints = count
	body.ServiceProxyHealthy = proxyHealthy
	out, err := json.MarshalIndent(body, "", "\t")
	if err != nil { // cannot happen with these types
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}

	setJSONHeaders(w)
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
	if count > 0 && proxyHealthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(out)
}
