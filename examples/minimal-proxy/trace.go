package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// The trace subcommand: read the node's current dataplane read-only with
// the standard tools, load it into the matching shipped fake, and trace
// one packet through it with the shipped tracer. See traceUsage.

const traceUsage = `Usage: minimal-proxy trace --to ADDR:PORT[/PROTO] [--from ADDR|node] [flags]

Reads this node's current service-proxy dataplane read-only (iptables-save,
nft list table, IPVS over netlink, HNS on Windows), whether the proxy runs
or not and whoever wrote the rules (svcproxy or kube-proxy), loads it into
svcproxy's fake of that dataplane and traces one new connection through
it: which backends it may reach and with what probability, whether it is
masqueraded, dropped or rejected, and the rules that decided it, with the
Service each belongs to. Needs root on Linux (the tools do); an HNS dump
(--from-dump) is traced anywhere. Exit status 0 when traced, 1 when the
dataplane could not be read or traced, 2 on bad flags.

Examples:
  minimal-proxy trace --from 10.244.1.5 --to 10.96.0.10:80/tcp
  minimal-proxy trace --proxy-mode nftables --from 203.0.113.7 --to 192.168.1.10:30080
  minimal-proxy trace --from node --to 10.96.0.10:53/udp -o json
  minimal-proxy trace --from-dump hns.txt --node-ip 192.168.1.10 --to 10.96.0.10:80

Flags:
`

// traceOptions are the trace subcommand's flags.
type traceOptions struct {
	mode     string // "", iptables, nftables, ipvs
	backend  string // "", nft, legacy (iptables mode)
	from, to string
	origin   string // "", pod, node, external
	output   string // text, json
	// The kernelspace (HNS) mode: a dump to trace instead of the node's
	// HNS, the HNS network, the node's addresses (node ports).
	fromDump string
	network  string
	nodeIPs  []netip.Addr
}

// parseTraceOptions parses the trace subcommand's arguments.
func parseTraceOptions(args []string, stderr io.Writer) (*traceOptions, proxytest.Packet, error) {
	o := &traceOptions{}
	fs := pflag.NewFlagSet("minimal-proxy trace", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(stderr, traceUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.to, "to", "", "The packet's destination, ADDR:PORT[/tcp|udp|sctp] (IPv6: [ADDR]:PORT/tcp). Required.")
	fs.StringVar(&o.from, "from", "", "The packet's source address, or 'node' for a process on this node (its first address of the destination's family). Empty: 'node'.")
	fs.StringVar(&o.origin, "origin", "", "Where the packet comes from: 'pod' (a pod on this node), 'node' or 'external'. Empty: 'node' when --from is a local address, else the interface the node routes --from through says where it arrives.")
	fs.StringVar(&o.mode, "proxy-mode", "", "The dataplane to read: 'iptables', 'nftables', 'ipvs' or 'kernelspace' (Windows HNS). Empty: kernelspace on Windows; elsewhere detected from what is on the node (the nftables kube-proxy table, else IPVS virtual servers, else iptables).")
	fs.StringVar(&o.backend, "iptables-backend", "", "For the iptables mode: 'nft' or 'legacy'. Empty: the one holding kube-proxy's chains.")
	fs.StringVar(&o.fromDump, "from-dump", "", "For the kernelspace mode: trace the HNS state in this file (as winkerneltest's FakeHNS.Dump writes it) instead of the node's HNS; works on any system.")
	fs.StringVar(&o.network, "network-name", "", "For the kernelspace mode: the HNS network of the pods. Empty: $KUBE_NETWORK.")
	var nodeIPs []string
	fs.StringSliceVar(&nodeIPs, "node-ip", nil, "For the kernelspace mode: the node's addresses, on which node-port load balancers answer (repeatable). Empty: this host's addresses.")
	fs.StringVarP(&o.output, "output", "o", "text", "'text' for people, 'json' for scripts.")
	if err := fs.Parse(args); err != nil {
		return nil, proxytest.Packet{}, err
	}
	for _, s := range nodeIPs {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, proxytest.Packet{}, fmt.Errorf("trace: --node-ip: %w", err)
		}
		o.nodeIPs = append(o.nodeIPs, a.Unmap())
	}
	if o.mode == "winkernel" || (o.mode == "" && (runtime.GOOS == "windows" || o.fromDump != "")) {
		o.mode = modeKernelspace // winkernel: kube-proxy's old name, as the proxy accepts it
	}
	if fs.NArg() > 0 {
		return nil, proxytest.Packet{}, fmt.Errorf("trace: unexpected arguments %q", fs.Args())
	}
	switch o.output {
	case "text", "json":
	default:
		return nil, proxytest.Packet{}, fmt.Errorf("trace: --output %q: want text or json", o.output)
	}
	switch o.mode {
	case "", modeIPTables, modeNFTables, modeIPVS, modeKernelspace:
	default:
		return nil, proxytest.Packet{}, fmt.Errorf("trace: --proxy-mode %q: want iptables, nftables, ipvs or kernelspace", o.mode)
	}
	if o.mode != modeKernelspace && (o.fromDump != "" || o.network != "" || len(o.nodeIPs) > 0) {
		return nil, proxytest.Packet{}, errors.New("trace: --from-dump, --network-name and --node-ip are for the kernelspace mode")
	}
	switch o.backend {
	case "", "nft", "legacy":
	default:
		return nil, proxytest.Packet{}, fmt.Errorf("trace: --iptables-backend %q: want nft or legacy", o.backend)
	}
	switch o.origin {
	case "", "pod", "node", "external":
	default:
		return nil, proxytest.Packet{}, fmt.Errorf("trace: --origin %q: want pod, node or external", o.origin)
	}
	if o.to == "" {
		return nil, proxytest.Packet{}, errors.New("trace: --to ADDR:PORT[/PROTO] is required")
	}
	p, err := parseDestination(o.to)
	if err != nil {
		return nil, proxytest.Packet{}, fmt.Errorf("trace: --to: %w", err)
	}
	if o.from != "" && o.from != "node" {
		src, err := netip.ParseAddr(o.from)
		if err != nil {
			return nil, proxytest.Packet{}, fmt.Errorf("trace: --from: %w", err)
		}
		if src.Unmap().Is4() != p.Dst.Is4() {
			return nil, proxytest.Packet{}, fmt.Errorf("trace: --from %s and --to %s are of different IP families", src, p.Dst)
		}
		p.Src = src.Unmap()
	}
	return o, p, nil
}

// parseDestination parses "10.96.0.10:80/tcp", "[fd00::10]:80/udp" or
// "10.96.0.10:80" (TCP).
func parseDestination(s string) (proxytest.Packet, error) {
	p := proxytest.Packet{Protocol: v1.ProtocolTCP}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		switch strings.ToLower(s[i+1:]) {
		case "tcp":
		case "udp":
			p.Protocol = v1.ProtocolUDP
		case "sctp":
			p.Protocol = v1.ProtocolSCTP
		default:
			return p, fmt.Errorf("protocol %q: want tcp, udp or sctp", s[i+1:])
		}
		s = s[:i]
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return p, fmt.Errorf("%q: want ADDR:PORT[/PROTO]", s)
	}
	if ap.Port() == 0 {
		return p, fmt.Errorf("%q: port 0", s)
	}
	p.Dst, p.Port = ap.Addr().Unmap(), int(ap.Port())
	return p, nil
}

// toolRunner runs a read-only listing tool and returns its standard
// output. Tests replace it with canned dumps.
type toolRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

// execTool runs the tool from PATH; a failure carries its stderr.
func execTool(ctx context.Context, name string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, &toolMissingError{tool: name}
	}
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return out, &toolFailedError{cmd: name + " " + strings.Join(args, " "), msg: msg, err: err}
	}
	return out, nil
}

// toolMissingError: the listing tool is not on PATH.
type toolMissingError struct{ tool string }

func (e *toolMissingError) Error() string {
	return fmt.Sprintf("%s is not installed (not on PATH): cannot read that dataplane", e.tool)
}

// toolFailedError: the listing tool ran and failed.
type toolFailedError struct {
	cmd, msg string
	err      error
}

func (e *toolFailedError) Error() string { return fmt.Sprintf("%s: %s", e.cmd, e.msg) }
func (e *toolFailedError) Unwrap() error { return e.err }

// errNotRoot: the listing tools need root (CAP_NET_ADMIN); said before
// any tool runs, rather than each failing its own way.
var errNotRoot = errors.New("reading the dataplane needs root (CAP_NET_ADMIN): run trace as root, e.g. with sudo")

// nodeView is what a trace needs to know about the node around its
// rules: its addresses, how it routes, which interface a source arrives
// on. Read live (readNodeView) or given by a test.
type nodeView struct {
	// Addrs are the node's local addresses (loopback aside).
	Addrs []netip.Addr
	// Routes are the node's routes with an output interface, most
	// specific first is not required.
	Routes []nodeRoute
	// DefaultInterface is the interface of the default route of each
	// family ("" when none).
	DefaultInterface4, DefaultInterface6 string
	// RouteLocalnet is net.ipv4.conf.all.route_localnet.
	RouteLocalnet bool
	// IPVSAddrs are the addresses on kube-ipvs0 (ipvs mode).
	IPVSAddrs []netip.Addr
}

// nodeRoute sends Prefix out of Interface.
type nodeRoute struct {
	Prefix    netip.Prefix
	Interface string
}

func (n *nodeView) isLocal(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	for _, l := range n.Addrs {
		if l == a {
			return true
		}
	}
	return false
}

// interfaceFor is the interface the node routes a to (longest prefix),
// else the default route's.
func (n *nodeView) interfaceFor(a netip.Addr) string {
	best, bits := "", -1
	for _, r := range n.Routes {
		if r.Prefix.Contains(a) && r.Prefix.Bits() > bits {
			best, bits = r.Interface, r.Prefix.Bits()
		}
	}
	if best != "" {
		return best
	}
	if a.Is4() {
		return n.DefaultInterface4
	}
	return n.DefaultInterface6
}

func (n *nodeView) defaultInterface(v6 bool) string {
	if v6 {
		return n.DefaultInterface6
	}
	return n.DefaultInterface4
}

// firstAddr is the node's first address of a's family.
func (n *nodeView) firstAddr(v6 bool) (netip.Addr, bool) {
	for _, a := range n.Addrs {
		if a.Is6() == v6 && !a.IsLinkLocalUnicast() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// completePacket fills in the packet's source and origin from the flags
// and the node.
func completePacket(o *traceOptions, p proxytest.Packet, node *nodeView) (proxytest.Packet, error) {
	v6 := p.Dst.Is6()
	if !p.Src.IsValid() {
		src, ok := node.firstAddr(v6)
		if !ok {
			return p, fmt.Errorf("trace: the node has no address of %s's family to send from: give --from", p.Dst)
		}
		p.Src = src
	}
	if origin, ok := flagOrigin(o.origin); ok {
		p.Origin = origin
		return p, nil
	}
	switch {
	case node.isLocal(p.Src):
		p.Origin = proxytest.FromNode
	case node.interfaceFor(p.Src) == node.defaultInterface(v6):
		p.Origin = proxytest.FromExternal
	default:
		// Routed through another interface than the default: a pod's
		// veth or bridge (or a directly attached client, which traverses
		// the same hooks).
		p.Origin = proxytest.FromPod
	}
	return p, nil
}

// flagOrigin is the origin --origin names ("pod", "external", "node");
// ok is false when it names none and the origin is to be found from the
// packet's source.
func flagOrigin(s string) (origin proxytest.Origin, ok bool) {
	switch s {
	case "pod":
		return proxytest.FromPod, true
	case "external":
		return proxytest.FromExternal, true
	case "node":
		return proxytest.FromNode, true
	}
	return origin, false
}

// traceReport is the answer, rendered as text or JSON.
type traceReport struct {
	// Dataplane says what was read: "iptables (nft backend)", ...
	Dataplane string `json:"dataplane"`
	// Read lists the commands whose output was loaded.
	Read   []string      `json:"read"`
	Packet packetReport  `json:"packet"`
	Result string        `json:"result"` // forwarded, not-proxied, rejected, dropped, ambiguous
	Masq   bool          `json:"masquerade"`
	Sticky bool          `json:"sticky"`
	Reach  []reachReport `json:"backends"`
	Paths  []pathReport  `json:"paths"`
	// Notes say what the trace could not tell.
	Notes []string `json:"notes,omitempty"`
}

type packetReport struct {
	Origin   string `json:"origin"`
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
}

// reachReport is one backend and the chance a first connection reaches it.
type reachReport struct {
	Backend string `json:"backend"`
	// Probability of a new client's first connection; nil when the
	// dataplane does not say (a scheduler with state, say).
	Probability *float64 `json:"probability,omitempty"`
	Services    []string `json:"services,omitempty"`
}

// pathReport is one way through the rules.
type pathReport struct {
	Verdict     string   `json:"verdict"`
	Backend     string   `json:"backend,omitempty"`
	Probability *float64 `json:"probability,omitempty"`
	Masquerade  bool     `json:"masquerade"`
	Sticky      bool     `json:"sticky"`
	// Affinity: this path is taken only when an earlier connection of the
	// client left a session-affinity record.
	Affinity bool     `json:"affinity,omitempty"`
	Local    bool     `json:"local,omitempty"`
	Services []string `json:"services,omitempty"`
	Steps    []string `json:"steps"`
}

func verdictWord(v proxytest.Verdict) string {
	switch v {
	case proxytest.Forwarded:
		return "forwarded"
	case proxytest.NotProxied:
		return "not-proxied"
	case proxytest.Rejected:
		return "rejected"
	case proxytest.Dropped:
		return "dropped"
	}
	return v.String()
}

func newPacketReport(p proxytest.Packet) packetReport {
	return packetReport{Origin: p.Origin.String(), Src: p.Src.String(), Dst: p.Dst.String(), Port: p.Port, Protocol: proxy.LowerProtocol(p.Protocol)}
}

// fillResult sets the report's summary from a combined result.
func (r *traceReport) fillResult(res proxytest.Result) {
	res = res.Normalize()
	r.Result = verdictWord(res.Verdict)
	r.Masq, r.Sticky = res.Masquerade, res.Sticky
	if len(r.Reach) == 0 {
		for _, b := range res.Backends {
			r.Reach = append(r.Reach, reachReport{Backend: b.String()})
		}
	}
}

// writeText renders the report for people.
func (r *traceReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "packet:    %s %s -> %s/%s\n", r.Packet.Origin, r.Packet.Src, netip.AddrPortFrom(netip.MustParseAddr(r.Packet.Dst), uint16(r.Packet.Port)), r.Packet.Protocol)
	fmt.Fprintf(w, "dataplane: %s (read with: %s)\n", r.Dataplane, strings.Join(r.Read, "; "))
	switch r.Result {
	case "forwarded":
		masq := "not masqueraded (the backend sees the client's address)"
		if r.Masq {
			masq = "masqueraded (the backend sees the node's address)"
		}
		fmt.Fprintf(w, "result:    forwarded, %s", masq)
		if r.Sticky {
			fmt.Fprint(w, ", session affinity (a client keeps its backend)")
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "backends:")
		for _, b := range r.Reach {
			prob := "      "
			if b.Probability != nil {
				prob = fmt.Sprintf("%5.1f%%", *b.Probability*100)
			}
			svc := ""
			if len(b.Services) > 0 {
				svc = "  (" + strings.Join(b.Services, ", ") + ")"
			}
			fmt.Fprintf(w, "  %s  %s%s\n", prob, b.Backend, svc)
		}
	case "not-proxied":
		fmt.Fprintln(w, "result:    not proxied: no service rule changed it")
	default:
		fmt.Fprintf(w, "result:    %s\n", r.Result)
	}
	for i, p := range r.Paths {
		head := p.Verdict
		if p.Backend != "" {
			head += " to " + p.Backend
		}
		if p.Probability != nil {
			head += fmt.Sprintf(", probability %.4g", *p.Probability)
		}
		if p.Affinity {
			head += ", when an earlier connection of this client chose it (session affinity)"
		}
		if p.Masquerade {
			head += ", masqueraded"
		}
		if len(p.Services) > 0 {
			head += " [" + strings.Join(p.Services, ", ") + "]"
		}
		fmt.Fprintf(w, "path %d: %s\n", i+1, head)
		for _, s := range p.Steps {
			if strings.HasSuffix(s, ": policy ACCEPT") {
				continue // a built-in chain let it through; -o json keeps these
			}
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// runTrace is the trace subcommand: it returns the exit code.
func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, p, err := parseTraceOptions(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy: %v\n", err)
		return exitUsage
	}
	var rep *traceReport
	if o.mode == modeKernelspace {
		// HNS (Windows), or a dump of it anywhere: no root, no netlink
		rep, err = traceWinkernel(o, p)
	} else {
		if os.Geteuid() != 0 {
			fmt.Fprintf(stderr, "minimal-proxy trace: %v\n", errNotRoot)
			return exitFailed
		}
		node, err := readNodeView(p.Dst.Is6())
		if err != nil {
			fmt.Fprintf(stderr, "minimal-proxy trace: reading the node's addresses and routes: %v\n", err)
			return exitFailed
		}
		rep, err = traceNode(ctx, o, p, node, execTool)
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy trace: %v\n", err)
		return exitFailed
	}
	if o.output == "json" {
		// Lists, never null, for scripts.
		if rep.Reach == nil {
			rep.Reach = []reachReport{}
		}
		if rep.Paths == nil {
			rep.Paths = []pathReport{}
		}
		for i := range rep.Paths {
			if rep.Paths[i].Steps == nil {
				rep.Paths[i].Steps = []string{}
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "minimal-proxy trace: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	rep.writeText(stdout)
	return exitOK
}

// traceNode reads the dataplane with run and traces p through it.
func traceNode(ctx context.Context, o *traceOptions, p proxytest.Packet, node *nodeView, run toolRunner) (*traceReport, error) {
	p, err := completePacket(o, p, node)
	if err != nil {
		return nil, err
	}
	mode := o.mode
	if mode == "" {
		mode, err = detectMode(ctx, p.Dst.Is6(), run)
		if err != nil {
			return nil, err
		}
	}
	switch mode {
	case modeIPTables:
		return traceIPTables(ctx, o.backend, p, node, run)
	case modeNFTables:
		return traceNFTables(ctx, p, node, run)
	case modeIPVS:
		return traceIPVS(ctx, o.backend, p, node, run)
	}
	return nil, fmt.Errorf("trace: unknown mode %q", mode)
}

// detectMode picks the dataplane holding service rules: the nftables
// kube-proxy table, else IPVS virtual servers or the ipvs mode's
// kube-ipvs0 interface (a node in the ipvs mode with no virtual server,
// every service headless or gone, still matches its ipsets in the
// iptables rules), else iptables.
func detectMode(ctx context.Context, v6 bool, run toolRunner) (string, error) {
	family := "ip"
	if v6 {
		family = "ip6"
	}
	if _, err := run(ctx, "nft", "list", "table", family, nftTableName); err == nil {
		return modeNFTables, nil
	}
	if hasIPVSServices() || hasIPVSInterface() {
		return modeIPVS, nil
	}
	return modeIPTables, nil
}

// nftTableName is the nftables table of kube-proxy and of the nftables engine.
const nftTableName = "kube-proxy"

// formatProbability rounds a probability for display and JSON.
func formatProbability(p float64) *float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(p, 'f', 6, 64), 64)
	return &v
}
