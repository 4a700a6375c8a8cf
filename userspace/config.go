package userspace

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// CaptureMode says how traffic for service addresses reaches the proxy sockets.
type CaptureMode int

const (
	// CaptureIPTables (the default) installs nat rules through Config.IPTables
	// that redirect each cluster IP, external IP, load-balancer IP and node
	// port to its proxy socket, for traffic from pods (PREROUTING,
	// KUBE-PORTALS-CONTAINER / KUBE-NODEPORT-CONTAINER) and from the node
	// itself (OUTPUT, KUBE-PORTALS-HOST / KUBE-NODEPORT-HOST), as kube-proxy's
	// old userspace mode did.
	CaptureIPTables CaptureMode = iota
	// CaptureNone installs no rules. Each service port is served on
	// ListenAddress at a proxy port (see ProxyAddr) and, when it has
	// one, at its node port.
	CaptureNone
	// CaptureBind installs no rules and listens directly on every service
	// address (cluster IP, external IPs, load-balancer IPs) at the service
	// port, plus ListenAddress at the node port. The addresses must be local
	// to the node (assigned to a dummy or loopback interface, or anywhere in
	// 127.0.0.0/8); an address that cannot be bound is a logged, counted
	// error for that service only.
	CaptureBind
)

func (m CaptureMode) String() string {
	switch m {
	case CaptureIPTables:
		return "iptables"
	case CaptureNone:
		return "none"
	case CaptureBind:
		return "bind"
	}
	return "CaptureMode(" + strconv.Itoa(int(m)) + ")"
}

// PortRange is an inclusive range of proxy ports. The zero value means
// kernel-chosen (ephemeral) ports.
type PortRange struct {
	Begin, End int
}

// ParsePortRange parses "begin-end" (or a single port); "" is the zero range.
func ParsePortRange(s string) (PortRange, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return PortRange{}, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	b, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return PortRange{}, fmt.Errorf("%w: %q: %v", ErrInvalidConfig, s, err)
	}
	e := b
	if found {
		if e, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
			return PortRange{}, fmt.Errorf("%w: %q: %v", ErrInvalidConfig, s, err)
		}
	}
	r := PortRange{Begin: b, End: e}
	if err := r.validate(); err != nil {
		return PortRange{}, err
	}
	return r, nil
}

func (r PortRange) validate() error {
	if r == (PortRange{}) {
		return nil
	}
	if r.Begin < 1 || r.End > 65535 || r.Begin > r.End {
		return fmt.Errorf("%w: port range %d-%d must satisfy 1 <= begin <= end <= 65535", ErrInvalidConfig, r.Begin, r.End)
	}
	return nil
}

// Size is the number of ports in the range (0 for the zero range).
func (r PortRange) Size() int {
	if r == (PortRange{}) {
		return 0
	}
	return r.End - r.Begin + 1
}

func (r PortRange) String() string {
	if r == (PortRange{}) {
		return ""
	}
	return strconv.Itoa(r.Begin) + "-" + strconv.Itoa(r.End)
}

// Config configures a Proxier: the fields every engine shares (Common,
// owned by the engine base: node, families, periods, logger, clock,
// metrics, health, conntrack, OnSync) and the userspace engine's own.
// Every zero value has the documented default:
//
//	userspace.Config{Common: engine.Common{NodeName: "node-a"}, Capture: userspace.CaptureNone}
//
// Common.Conntrack deletes UDP conntrack entries (CaptureIPTables only):
// besides the stale-UDP entries every engine clears, when the capture
// rules of a UDP service port change (it appears, gains or loses
// endpoints, moves, or goes away) entries to its addresses and node port
// are deleted so that established flows are captured anew (or not at
// all). nil deletes none: a UDP client that keeps its source port then
// stays on its old path until the entry expires.
//
// Common.Metrics receives kube-proxy's sync metrics from the base and,
// from this engine, iptables rule counts and restore failures and the
// services without local endpoints; the data-path counters are in
// Counters either way. Common.NodeIPs are also what the tracer takes as
// the node's addresses, and the first of the family is the default HostIP.
type Config struct {
	engine.Common

	// ListenAddress is the address proxy sockets bind; the zero value means
	// the unspecified address of the family (0.0.0.0 or ::).
	ListenAddress netip.Addr
	// HostIP is the address node-originated traffic is DNATed to in
	// CaptureIPTables mode when ListenAddress is unspecified (REDIRECT would
	// send it to 127.0.0.1 and the UDP replies would come from the wrong
	// source). Zero value: Common.NodeIP(), else the first global unicast
	// address of the family found on the node's interfaces; if there is
	// none, node-originated traffic is REDIRECTed (fine for TCP).
	HostIP netip.Addr
	// ClusterCIDRs hold the pod addresses (CaptureIPTables only). Traffic
	// from them to a node port, external IP or load-balancer IP of an
	// externalTrafficPolicy: Local service is short-circuited to every
	// endpoint, as kube-proxy does; without them pods get only the local
	// endpoints there.
	ClusterCIDRs []netip.Prefix
	// PortRange is where proxy ports are allocated; the zero value lets the
	// kernel choose. Exhausting it is an error for the affected service only
	// (ErrPortsExhausted), logged and counted.
	PortRange PortRange
	// UDPIdleTimeout ends a UDP flow (client address → backend) after this
	// long without a datagram in either direction; default 250ms.
	UDPIdleTimeout time.Duration
	// MaxUDPFlows caps the live UDP flows of one proxy socket (each holds a
	// socket and a goroutine); datagrams from further clients are dropped
	// and counted (CounterUDPFlowLimit) until flows expire. Default 10000;
	// negative means no cap.
	MaxUDPFlows int
	// TCPDialTimeout bounds one connection attempt to a backend; default 1s.
	TCPDialTimeout time.Duration
	// MaxRetries is how many further backends are tried after a failed
	// dial (default 3, so 4 attempts); negative means no retry.
	MaxRetries int
	// RetryBackoff is the pause before the first retry, doubled for each
	// further one and capped at 1s; default 10ms; negative means none.
	RetryBackoff time.Duration
	// TCPHalfCloseTimeout: once one side of a proxied TCP connection has
	// finished sending (its FIN is passed on as a half-close), the other
	// side must keep sending: after this long with not a byte from it,
	// both sides are reset. It is what ends a connection whose client
	// left while its backend accepted and never answered (and the
	// converse), instead of holding two sockets and two goroutines until
	// the backend dies. Default 10s; negative means wait for ever.
	TCPHalfCloseTimeout time.Duration
	// EndpointCloseGracePeriod: established TCP connections to an endpoint
	// that left the service are closed this long after it left, unless it
	// came back. Default 30s; negative means never. (UDP flows to it end
	// at once.)
	EndpointCloseGracePeriod time.Duration
	// Capture selects how traffic reaches the proxy; default CaptureIPTables.
	Capture CaptureMode
	// LoadBalancer chooses endpoints; nil means a new round-robin balancer
	// (NewRoundRobin) with ClientIP session affinity support.
	LoadBalancer LoadBalancer
}

// Interfaces is what a Proxier drives (fakes in tests: see
// userspacetest.Fakes).
type Interfaces struct {
	// IPTables is the runner for capture rules; required for
	// CaptureIPTables, unused otherwise. Its family is the proxier's.
	IPTables xtables.Runner
	// Sockets opens listeners and backend connections; nil means the
	// operating system's (OSSockets).
	Sockets Sockets
}

// Errors. Test with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error returned by NewProxier.
	ErrInvalidConfig = errors.New("userspace: invalid config")
	// ErrPortsExhausted: no free proxy port was left in Config.PortRange.
	ErrPortsExhausted = errors.New("userspace: proxy port range exhausted")
	// ErrNoEndpoints: the service port has no usable endpoint.
	ErrNoEndpoints = errors.New("userspace: no endpoints")
	// ErrUnknownService: the balancer has no such service port.
	ErrUnknownService = errors.New("userspace: unknown service port")
	// ErrUnsupportedProtocol: SCTP (and anything but TCP/UDP) is not proxied.
	ErrUnsupportedProtocol = errors.New("userspace: protocol not supported by the userspace proxy")
	// ErrClosed: the proxier was closed (the engine base's ErrClosed).
	ErrClosed = engine.ErrClosed
)

const (
	defaultUDPIdleTimeout = 250 * time.Millisecond
	defaultDialTimeout    = time.Second
	defaultMaxUDPFlows    = 10000
	defaultMaxRetries     = 3
	defaultRetryBackoff   = 10 * time.Millisecond
	maxRetryBackoff       = time.Second
	defaultGracePeriod    = 30 * time.Second
	defaultHalfClose      = 10 * time.Second
)

// withDefaults validates c and ifs and fills their zero values.
func (c Config) withDefaults(ifs Interfaces) (Config, Interfaces, error) {
	var family v1.IPFamily
	if c.Capture == CaptureIPTables && ifs.IPTables != nil {
		family = ifs.IPTables.Family()
	}
	common, err := c.Common.WithDefaults(family)
	if err != nil {
		return c, ifs, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c.Common = common
	is6 := c.IPFamily == v1.IPv6Protocol
	if !c.ListenAddress.IsValid() {
		if is6 {
			c.ListenAddress = netip.IPv6Unspecified()
		} else {
			c.ListenAddress = netip.IPv4Unspecified()
		}
	}
	c.ListenAddress = c.ListenAddress.Unmap()
	if c.ListenAddress.Is6() != is6 {
		return c, ifs, fmt.Errorf("%w: ListenAddress %s is not of family %s", ErrInvalidConfig, c.ListenAddress, c.IPFamily)
	}
	if c.HostIP.IsValid() && c.HostIP.Unmap().Is6() != is6 {
		return c, ifs, fmt.Errorf("%w: HostIP %s is not of family %s", ErrInvalidConfig, c.HostIP, c.IPFamily)
	}
	c.HostIP = c.HostIP.Unmap()
	if err := c.PortRange.validate(); err != nil {
		return c, ifs, err
	}
	if c.UDPIdleTimeout < 0 || c.TCPDialTimeout < 0 {
		return c, ifs, fmt.Errorf("%w: negative timeout", ErrInvalidConfig)
	}
	if c.UDPIdleTimeout == 0 {
		c.UDPIdleTimeout = defaultUDPIdleTimeout
	}
	if c.MaxUDPFlows == 0 {
		c.MaxUDPFlows = defaultMaxUDPFlows
	}
	if c.TCPDialTimeout == 0 {
		c.TCPDialTimeout = defaultDialTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = defaultMaxRetries
	} else if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = defaultRetryBackoff
	} else if c.RetryBackoff < 0 {
		c.RetryBackoff = 0
	}
	if c.TCPHalfCloseTimeout == 0 {
		c.TCPHalfCloseTimeout = defaultHalfClose
	}
	if c.EndpointCloseGracePeriod == 0 {
		c.EndpointCloseGracePeriod = defaultGracePeriod
	}
	switch c.Capture {
	case CaptureIPTables:
		if ifs.IPTables == nil {
			return c, ifs, fmt.Errorf("%w: CaptureIPTables needs Interfaces.IPTables", ErrInvalidConfig)
		}
		if c.ListenAddress.IsLoopback() {
			return c, ifs, fmt.Errorf("%w: CaptureIPTables cannot redirect to a loopback ListenAddress %s", ErrInvalidConfig, c.ListenAddress)
		}
	case CaptureNone, CaptureBind:
	default:
		return c, ifs, fmt.Errorf("%w: %s", ErrInvalidConfig, c.Capture)
	}
	if ifs.Sockets == nil {
		ifs.Sockets = OSSockets{}
	}
	if c.LoadBalancer == nil {
		c.LoadBalancer = NewRoundRobin(c.Clock)
	}
	return c, ifs, nil
}
