package proxytest

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Options are engine settings a scenario needs; the zero value is the
// standard configuration described on Topology.
type Options struct {
	// MasqueradeAll: masquerade all traffic to service addresses
	// (kube-proxy's --masquerade-all).
	MasqueradeAll bool
}

// Scenario is a sequence of steps run against one fresh engine.
type Scenario struct {
	// Name is unique in the table; it names the subtest.
	Name string
	// Doc says what the scenario shows, for readers of failures.
	Doc string
	// Options the engine must be built with.
	Options Options
	// Ordered says the checks of a step rely on the transition from the
	// previous step (for example conntrack entries that only the listed
	// transitions clear); Shuffle leaves such scenarios out.
	Ordered bool
	Steps   []Step
}

// Step is one desired state and what must hold once it is synced.
type Step struct {
	// Name is unique within the scenario.
	Name string
	// Objects is the complete state: objects missing from it (and present
	// in the previous step) are deleted.
	Objects
	Checks []Check
}

// Check is one packet and where it must go.
type Check struct {
	// Name is unique within the step.
	Name   string
	Packet Packet
	Want   Result
}

// Quirk records where one engine knowingly differs from the table (for
// example, IPVS masquerades traffic that iptables does not). Keep quirks
// few, and say why in Reason.
type Quirk struct {
	// Scenario, Step and Check name what the quirk applies to; an empty
	// Step or Check matches every step or check. Scenario is required.
	Scenario, Step, Check string
	// Reason says why the engine differs (required).
	Reason string
	// Adjust rewrites the wanted result; nil skips the check.
	Adjust func(want Result) Result
}

// Matches reports whether q applies to the check named check of the given
// scenario and step. A step that Shuffle repeated ("name#2") matches by its
// original name.
func (q Quirk) Matches(scenario, step, check string) bool {
	return q.Scenario == scenario && (q.Step == "" || q.Step == baseStepName(step)) && (q.Check == "" || q.Check == check)
}

// Packet constructors over a topology.

// FromPodTo is a TCP packet from topo.ClientPod to dst:port.
func FromPodTo(topo Topology, dst netip.Addr, port int) Packet {
	return Packet{Origin: FromPod, Src: topo.ClientPod.IP, Dst: dst, Port: port, Protocol: v1.ProtocolTCP}
}

// FromNodeTo is a TCP packet from the node (source topo.NodeIP) to dst:port.
func FromNodeTo(topo Topology, dst netip.Addr, port int) Packet {
	return Packet{Origin: FromNode, Src: topo.NodeIP, Dst: dst, Port: port, Protocol: v1.ProtocolTCP}
}

// FromExternalTo is a TCP packet from topo.ExternalClient to dst:port.
func FromExternalTo(topo Topology, dst netip.Addr, port int) Packet {
	return Packet{Origin: FromExternal, Src: topo.ExternalClient, Dst: dst, Port: port, Protocol: v1.ProtocolTCP}
}

// UDP returns p as UDP.
func UDP(p Packet) Packet { p.Protocol = v1.ProtocolUDP; return p }

// From returns p with another source address.
func From(p Packet, src netip.Addr) Packet { p.Src = src; return p }

// ForwardedTo is the result "forwarded to backends", masqueraded or not.
func ForwardedTo(masquerade bool, backends ...netip.AddrPort) Result {
	return Result{Verdict: Forwarded, Masquerade: masquerade, Backends: backends}
}

// StickyTo is ForwardedTo with ClientIP affinity.
func StickyTo(masquerade bool, backends ...netip.AddrPort) Result {
	r := ForwardedTo(masquerade, backends...)
	r.Sticky = true
	return r
}

// Backend is pod's address with port.
func Backend(pod Pod, port int) netip.AddrPort { return netip.AddrPortFrom(pod.IP, uint16(port)) }

// Backends is every pod's address with port.
func Backends(port int, pods ...Pod) []netip.AddrPort {
	out := make([]netip.AddrPort, len(pods))
	for i, p := range pods {
		out[i] = Backend(p, port)
	}
	return out
}

// StepFileName names the file that holds what one step of a scenario
// leaves (a golden, an upstream proxier's rules for the same step):
// "<scenario>__<step>", with '/', ' ' and '#' replaced by '_'.
func StepFileName(scenario, step string) string {
	return stepFileChars.Replace(scenario) + "__" + stepFileChars.Replace(step)
}

var stepFileChars = strings.NewReplacer("/", "_", " ", "_", "#", "_")
