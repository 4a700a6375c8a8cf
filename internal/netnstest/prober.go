package netnstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Prober defaults.
const (
	// DefaultMaxAttempts bounds the connections one trace makes.
	DefaultMaxAttempts = 30
	// DefaultTimeout bounds each connection attempt (connect and answer).
	DefaultTimeout = 300 * time.Millisecond
	// StickyAttempts is how many answers, all from one backend, make a
	// result Sticky.
	StickyAttempts = 10
	// unhintedAnswers is how many answers Trace (no wanted result) collects.
	unhintedAnswers = 10
	// failuresToStop ends sampling after this many failures with no answer.
	failuresToStop = 2
	// DefaultSlowTimeout bounds the second try of an attempt that timed
	// out while the trace otherwise looks forwarded (see Prober).
	DefaultSlowTimeout = 5 * time.Second
)

// Prober is a proxytest.Tracer (and Sampler) that answers with real
// traffic: for each Packet it connects (TCP) or sends a datagram (UDP) from
// the namespace its Origin and Src name — the pod with that address, the
// node (bound to the node IP), or the external client with that address —
// to Dst:Port, several times, and derives the Result from what happened.
// Each attempt uses a fresh socket and so a fresh conntrack entry, except
// for UDP packets with a SrcPort, which reuse their flow on purpose.
// Results:
//
//   - answers from pods: Forwarded, with the set of pod:port that answered;
//     Masquerade when the pods saw a node address (NodeIP or PodGateway)
//     instead of Src; Sticky when at least StickyAttempts answers all came
//     from one backend;
//   - an answer from the address that was dialled itself (the world
//     router, or a pod dialled directly): NotProxied;
//   - connection refused or ICMP unreachable: Rejected;
//   - no answer within the timeout, or a local netfilter drop (EPERM): Dropped.
//
// Outcomes that disagree across attempts (some answers, some timeouts; some
// masqueraded, some not) are reported as an error, never averaged.
//
// A slow host is not a drop: an emulated guest under load can take longer
// than Timeout to carry one connection through. So an attempt that timed
// out (or connected and then stayed silent) in a trace where another
// attempt answered, or in a trace whose wanted result is not a drop, is
// tried once more with SlowTimeout, and only that second try counts. A real drop
// still times out twice and a real mix of answers and drops is still an
// error; a fast trace costs nothing extra.
type Prober struct {
	env *Env
	// MaxAttempts bounds the attempts per trace; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Timeout bounds each attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// SlowTimeout bounds the second try of a timed-out attempt; 0 means
	// DefaultSlowTimeout, stretched by $SVCPROXY_E2E_SLOWDOWN (an integer
	// factor above 1; hack/matrix.sh sets it in its emulated guests).
	SlowTimeout time.Duration
}

var (
	_ proxytest.Tracer  = (*Prober)(nil)
	_ proxytest.Sampler = (*Prober)(nil)
)

// Prober returns a prober for this environment.
func (e *Env) Prober() *Prober { return &Prober{env: e} }

// Trace samples up to 10 answers (fewer when the first attempts fail).
func (p *Prober) Trace(pk proxytest.Packet) (proxytest.Result, error) {
	return p.sample(pk, nil)
}

// TraceSample samples until every backend of want answered (and, for a
// sticky want, at least StickyAttempts answers came), bounded by
// MaxAttempts; want only decides when to stop.
func (p *Prober) TraceSample(pk proxytest.Packet, want proxytest.Result) (proxytest.Result, error) {
	return p.sample(pk, &want)
}

type outcome int

const (
	answered outcome = iota
	refused
	timedOut
)

type attempt struct {
	kind   outcome
	answer Answer
	why    string // for failures: the error seen
	silent bool   // timedOut after the connection was accepted
}

// Source returns the namespace a packet is sent from.
func (p *Prober) Source(pk proxytest.Packet) (*Namespace, error) {
	topo := p.env.Topo
	switch pk.Origin {
	case proxytest.FromPod:
		if pod, ok := topo.PodByIP(pk.Src); ok {
			return p.env.Pods[pod.Name], nil
		}
	case proxytest.FromNode:
		if pk.Src == topo.NodeIP {
			return p.env.Node, nil
		}
	case proxytest.FromExternal:
		switch pk.Src {
		case topo.ExternalClient:
			return p.env.External, nil
		case topo.ExternalClient2:
			return p.env.External2, nil
		}
	}
	return nil, fmt.Errorf("netnstest: no namespace sends %s packets from %s", pk.Origin, pk.Src)
}

func (p *Prober) sample(pk proxytest.Packet, want *proxytest.Result) (proxytest.Result, error) {
	ns, err := p.Source(pk)
	if err != nil {
		return proxytest.Result{}, err
	}
	max := p.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	timeout, slow := p.timeouts()
	var atts []attempt
	for i := 0; i < max; i++ {
		a, err := p.once(ns, pk, timeout)
		if err != nil {
			return proxytest.Result{}, err
		}
		if a.kind == timedOut && (a.silent || answeredAny(atts) || (want != nil && want.Verdict != proxytest.Dropped)) {
			if a, err = p.once(ns, pk, slow); err != nil {
				return proxytest.Result{}, err
			}
		}
		atts = append(atts, a)
		if p.enough(pk, atts, want) {
			break
		}
	}
	// Timeouts before the first answer were not retried: retry them now
	// that the trace is known to answer.
	if answeredAny(atts) {
		for i := range atts {
			if atts[i].kind == timedOut {
				if atts[i], err = p.once(ns, pk, slow); err != nil {
					return proxytest.Result{}, err
				}
			}
		}
	}
	for _, a := range atts {
		if a.silent && a.kind == timedOut {
			return proxytest.Result{}, fmt.Errorf("netnstest: %s: connected but got no answer within %s: %s", pk, slow, a.why)
		}
	}
	return p.derive(pk, atts)
}

func (p *Prober) timeouts() (timeout, slow time.Duration) {
	timeout, slow = p.Timeout, p.SlowTimeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if slow <= 0 {
		slow = slowdown(DefaultSlowTimeout)
	}
	if slow < timeout {
		slow = timeout
	}
	return timeout, slow
}

// slowdown stretches d by $SVCPROXY_E2E_SLOWDOWN when that is an integer
// above 1, as examples/minimal-proxy's e2e stretches its waits: a guest
// emulated by qemu (TCG) on a busy host can take longer than
// DefaultSlowTimeout to carry one connection through a userspace proxy.
func slowdown(d time.Duration) time.Duration {
	if f, err := strconv.Atoi(os.Getenv("SVCPROXY_E2E_SLOWDOWN")); err == nil && f > 1 {
		return d * time.Duration(f)
	}
	return d
}

func answeredAny(atts []attempt) bool {
	for _, a := range atts {
		if a.kind == answered {
			return true
		}
	}
	return false
}

// enough decides whether sampling can stop.
func (p *Prober) enough(pk proxytest.Packet, atts []attempt, want *proxytest.Result) bool {
	answers, failures := 0, 0
	seen := map[netip.AddrPort]bool{}
	for _, a := range atts {
		if a.kind == answered {
			answers++
			if b, ok := p.backend(pk, a.answer); ok {
				seen[b] = true
			}
		} else {
			failures++
		}
	}
	switch {
	case answers == 0:
		return failures >= failuresToStop
	case want == nil:
		return answers >= unhintedAnswers
	case want.Verdict != proxytest.Forwarded:
		return answers >= failuresToStop+1 // wrong anyway; a few samples show where it goes
	}
	for _, b := range want.Backends {
		if !seen[b] {
			return false
		}
	}
	return !want.Sticky || answers >= StickyAttempts
}

// backend maps an answer to the backend it came from; ok is false when the
// dialled address itself answered (not proxied).
func (p *Prober) backend(pk proxytest.Packet, a Answer) (netip.AddrPort, bool) {
	if a.Local == netip.AddrPortFrom(pk.Dst, uint16(pk.Port)) {
		return netip.AddrPort{}, false
	}
	return a.Local, true
}

func (p *Prober) derive(pk proxytest.Packet, atts []attempt) (proxytest.Result, error) {
	topo := p.env.Topo
	var answers []Answer
	counts := map[outcome]int{}
	var whys []string
	for _, a := range atts {
		counts[a.kind]++
		if a.kind == answered {
			answers = append(answers, a.answer)
		} else if a.why != "" && len(whys) < 3 {
			whys = append(whys, a.why)
		}
	}
	if len(counts) > 1 {
		return proxytest.Result{}, fmt.Errorf("netnstest: inconsistent outcomes over %d attempts: %d answered, %d refused, %d timed out (%s)",
			len(atts), counts[answered], counts[refused], counts[timedOut], strings.Join(whys, "; "))
	}
	switch {
	case counts[refused] > 0:
		return proxytest.Result{Verdict: proxytest.Rejected}, nil
	case counts[timedOut] > 0:
		return proxytest.Result{Verdict: proxytest.Dropped}, nil
	}

	nodeAddrs := map[netip.Addr]bool{topo.NodeIP: true, topo.PodGateway: true}
	res := proxytest.Result{Verdict: proxytest.Forwarded}
	direct, masq := 0, 0
	seen := map[netip.AddrPort]bool{}
	for _, a := range answers {
		b, proxied := p.backend(pk, a)
		if !proxied {
			direct++
			continue
		}
		pod, ok := topo.PodByName(a.Name)
		if !ok || pod.IP != b.Addr() {
			return proxytest.Result{}, fmt.Errorf("netnstest: answer %q: %s reached at %s is not a backend", a, a.Name, a.Local)
		}
		if !seen[b] {
			seen[b] = true
			res.Backends = append(res.Backends, b)
		}
		switch {
		case a.Client == pk.Src:
		case nodeAddrs[a.Client]:
			masq++
		default:
			return proxytest.Result{}, fmt.Errorf("netnstest: answer %q: backend saw source %s, neither the client %s nor a node address", a, a.Client, pk.Src)
		}
	}
	if direct > 0 {
		if direct != len(answers) {
			return proxytest.Result{}, fmt.Errorf("netnstest: inconsistent: %d of %d answers came from %s itself (not proxied), the rest from backends",
				direct, len(answers), netip.AddrPortFrom(pk.Dst, uint16(pk.Port)))
		}
		return proxytest.Result{Verdict: proxytest.NotProxied}, nil
	}
	proxied := len(answers)
	if masq != 0 && masq != proxied {
		return proxytest.Result{}, fmt.Errorf("netnstest: inconsistent: %d of %d answers were masqueraded", masq, proxied)
	}
	res.Masquerade = masq > 0
	res.Sticky = proxied >= StickyAttempts && len(seen) == 1
	return res.Normalize(), nil
}

// once makes one attempt from ns. Only harness failures are errors; what
// the network did is in the attempt.
func (p *Prober) once(ns *Namespace, pk proxytest.Packet, timeout time.Duration) (attempt, error) {
	v6 := p.env.Topo.Family == v1.IPv6Protocol
	src := net.IP(pk.Src.AsSlice())
	dst := netip.AddrPortFrom(pk.Dst, uint16(pk.Port))
	var a attempt
	var ferr error
	err := Exec(ns, func() error {
		if pk.SrcPort != 0 && pk.Protocol != v1.ProtocolUDP {
			ferr = fmt.Errorf("netnstest: %s: a fixed source port is only supported for UDP", pk)
			return nil
		}
		switch pk.Protocol {
		case v1.ProtocolTCP:
			network := "tcp4"
			if v6 {
				network = "tcp6"
			}
			c, err := dialTCP(network, &net.TCPAddr{IP: src}, dst.String(), timeout)
			if err != nil {
				a, ferr = classify(err)
				return nil
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			data, err := io.ReadAll(io.LimitReader(c, 512))
			if len(data) == 0 {
				a = attempt{kind: timedOut, silent: true, why: fmt.Sprint(err)}
				return nil
			}
			a.answer, ferr = ParseAnswer(string(data))
		case v1.ProtocolUDP:
			network := "udp4"
			if v6 {
				network = "udp6"
			}
			c, err := net.DialUDP(network, &net.UDPAddr{IP: src, Port: pk.SrcPort}, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				a, ferr = classify(err)
				return nil
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			if _, err := c.Write([]byte("probe\n")); err != nil {
				a, ferr = classify(err)
				return nil
			}
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			if err != nil {
				a, ferr = classify(err)
				return nil
			}
			a.answer, ferr = ParseAnswer(string(buf[:n]))
		default:
			ferr = fmt.Errorf("netnstest: %s: protocol %s is not supported by the prober", pk, pk.Protocol)
		}
		return nil
	})
	if err != nil {
		return attempt{}, err
	}
	return a, ferr
}

// classify turns a socket error into what the network did, or an error
// when it says nothing about the network.
func classify(err error) (attempt, error) {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return attempt{kind: refused, why: err.Error()}, nil
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		// A DROP in the node's own OUTPUT path fails the send locally.
		return attempt{kind: timedOut, why: err.Error()}, nil
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return attempt{kind: timedOut, why: "timeout"}, nil
	}
	return attempt{}, fmt.Errorf("netnstest: probe failed: %w", err)
}

// Dump returns the node's iptables rules (every backend and family that has
// any), for failure reports.
func (p *Prober) Dump() string { return p.env.DumpRules() }

// DumpRules returns iptables-save output of the node namespace for each of
// iptables-nft, iptables-legacy (and the ip6tables ones) that has rules.
func (e *Env) DumpRules() string {
	var b strings.Builder
	for _, tool := range []string{"iptables-nft-save", "iptables-legacy-save", "ip6tables-nft-save", "ip6tables-legacy-save"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		var out []byte
		err = Exec(e.Node, func() error {
			var err error
			out, err = exec.Command(path).CombinedOutput()
			return err
		})
		if err != nil {
			fmt.Fprintf(&b, "# %s: %v\n", tool, err)
			continue
		}
		if strings.Contains(string(out), "\n-A ") {
			fmt.Fprintf(&b, "# %s\n%s", tool, out)
		}
	}
	if b.Len() == 0 {
		return "(no iptables rules in the node namespace)\n"
	}
	return b.String()
}
