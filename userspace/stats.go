package userspace

import "sync/atomic"

// Counter names reported by Counters. Syncs and their failures are in
// the engine base's Stats (Proxier.Stats).
const (
	CounterServiceErrors   = "service_errors"        // a service port could not be served (ports exhausted, bind failed)
	CounterSkippedProtocol = "skipped_protocol"      // SCTP service ports refused
	CounterTCPAccepted     = "tcp_accepted"          // client connections accepted
	CounterTCPProxied      = "tcp_proxied"           // client connections connected to an endpoint
	CounterNoEndpoints     = "no_endpoints"          // connections/datagrams refused for lack of endpoints
	CounterDialErrors      = "dial_errors"           // failed dial attempts (each retry counts)
	CounterDialFailures    = "dial_failures"         // connections given up after every attempt failed
	CounterAcceptErrors    = "accept_errors"         // transient Accept errors (e.g. out of fds)
	CounterUDPFlows        = "udp_flows"             // UDP flows created
	CounterUDPFlowsExpired = "udp_flows_expired"     // UDP flows ended by the idle timeout
	CounterUDPToBackend    = "udp_datagrams_backend" // datagrams forwarded to endpoints
	CounterUDPToClient     = "udp_datagrams_client"  // datagrams returned to clients
	CounterUDPDropped      = "udp_datagrams_dropped" // datagrams dropped
	CounterUDPReadErrors   = "udp_read_errors"       // errors reading a UDP proxy socket
	CounterGraceClosed     = "grace_closed"          // connections/flows closed after their endpoint left
	CounterUDPFlowLimit    = "udp_flow_limit"        // datagrams dropped because a socket had MaxUDPFlows flows
	CounterHalfCloseReset  = "tcp_half_close_reset"  // connections reset after TCPHalfCloseTimeout (one side done, the other silent)
)

type counter int

const (
	counterServiceErrors counter = iota
	counterSkippedProtocol
	counterTCPAccepted
	counterTCPProxied
	counterNoEndpoints
	counterDialErrors
	counterDialFailures
	counterAcceptErrors
	counterUDPFlows
	counterUDPFlowsExpired
	counterUDPToBackend
	counterUDPToClient
	counterUDPDropped
	counterUDPReadErrors
	counterGraceClosed
	counterUDPFlowLimit
	counterHalfCloseReset
	numCounters
)

var counterNames = [numCounters]string{
	CounterServiceErrors, CounterSkippedProtocol,
	CounterTCPAccepted, CounterTCPProxied, CounterNoEndpoints, CounterDialErrors,
	CounterDialFailures, CounterAcceptErrors, CounterUDPFlows, CounterUDPFlowsExpired,
	CounterUDPToBackend, CounterUDPToClient, CounterUDPDropped, CounterUDPReadErrors,
	CounterGraceClosed, CounterUDPFlowLimit, CounterHalfCloseReset,
}

type counters [numCounters]atomic.Int64

func (p *Proxier) count(c counter) {
	p.counters[c].Add(1)
}

// Counters returns every data-path counter of p by name (see the Counter*
// constants).
func Counters(p *Proxier) map[string]int64 {
	out := make(map[string]int64, numCounters)
	for i := range p.counters {
		out[counterNames[i]] = p.counters[i].Load()
	}
	return out
}
