package proxytest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Validate checks a table against its topology: names are unique and not
// empty, every packet comes from where its Origin says (a pod of this
// node, the node IP, an external client), every address is of the
// topology's family, every service port, target port and slice port is in
// Topology.ServerPorts (so the real-kernel harness has a listener), every
// wanted backend is a pod, and not-proxied packets go to addresses where
// something answers (a pod, or the service, external-IP and load-balancer
// ranges behind the node's default route).
func Validate(topo Topology, scenarios []Scenario) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seenSc := map[string]bool{}
	for _, sc := range scenarios {
		if sc.Name == "" || seenSc[sc.Name] {
			bad("scenario name %q empty or duplicate", sc.Name)
		}
		seenSc[sc.Name] = true
		if len(sc.Steps) == 0 {
			bad("scenario %q has no steps", sc.Name)
		}
		seenSt := map[string]bool{}
		for _, st := range sc.Steps {
			where := fmt.Sprintf("scenario %q step %q", sc.Name, st.Name)
			if st.Name == "" || seenSt[st.Name] {
				bad("%s: step name empty or duplicate", where)
			}
			seenSt[st.Name] = true
			if len(st.Checks) == 0 {
				bad("%s: no checks", where)
			}
			for _, err := range validateObjects(topo, st.Objects) {
				bad("%s: %v", where, err)
			}
			seenCk := map[string]bool{}
			for _, c := range st.Checks {
				if c.Name == "" || seenCk[c.Name] {
					bad("%s: check name %q empty or duplicate", where, c.Name)
				}
				seenCk[c.Name] = true
				if err := validateCheck(topo, c); err != nil {
					bad("%s check %q: %v", where, c.Name, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func validateObjects(topo Topology, o Objects) []error {
	var errs []error
	for _, s := range o.Services {
		if s == nil {
			continue // Feeder reports it
		}
		for _, p := range s.Spec.Ports {
			if !slices.Contains(topo.ServerPorts, int(p.Port)) {
				errs = append(errs, fmt.Errorf("service %s port %d not in ServerPorts", s.Name, p.Port))
			}
			if p.TargetPort.Type == intstr.Int && !slices.Contains(topo.ServerPorts, p.TargetPort.IntValue()) {
				errs = append(errs, fmt.Errorf("service %s targetPort %s not in ServerPorts", s.Name, p.TargetPort.String()))
			}
		}
	}
	for _, s := range o.EndpointSlices {
		if s == nil {
			continue
		}
		for _, p := range s.Ports {
			if p.Port != nil && !slices.Contains(topo.ServerPorts, int(*p.Port)) {
				errs = append(errs, fmt.Errorf("endpoint slice %s port %d not in ServerPorts", s.Name, *p.Port))
			}
		}
	}
	return errs
}

func validateCheck(topo Topology, c Check) error {
	p := c.Packet
	fam := func(a interface{ Is4() bool }) bool { return a.Is4() == (topo.Family == v1.IPv4Protocol) }
	if !p.Src.IsValid() || !p.Dst.IsValid() || !fam(p.Src) || !fam(p.Dst) {
		return fmt.Errorf("packet %s: addresses must be valid %s addresses", p, topo.Family)
	}
	if p.Port < 1 || p.Port > 65535 {
		return fmt.Errorf("packet %s: bad port", p)
	}
	switch p.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP:
	default:
		return fmt.Errorf("packet %s: protocol must be TCP or UDP", p)
	}
	if p.SrcPort < 0 || p.SrcPort > 65535 || (p.SrcPort != 0 && p.Protocol != v1.ProtocolUDP) {
		return fmt.Errorf("packet %s: a source port must be valid and is only for UDP", p)
	}
	if p.SrcPort != 0 && c.Want.Verdict == Forwarded && len(c.Want.Backends) != 1 {
		return fmt.Errorf("packet %s: with a fixed source port every datagram follows one conntrack entry; want exactly one backend", p)
	}
	switch p.Origin {
	case FromPod:
		if pod, ok := topo.PodByIP(p.Src); !ok || pod.Node != topo.NodeName {
			return fmt.Errorf("packet %s: a FromPod source must be a pod on %s", p, topo.NodeName)
		}
	case FromNode:
		if p.Src != topo.NodeIP {
			return fmt.Errorf("packet %s: a FromNode source must be the node IP %s", p, topo.NodeIP)
		}
	case FromExternal:
		if p.Src != topo.ExternalClient && p.Src != topo.ExternalClient2 {
			return fmt.Errorf("packet %s: a FromExternal source must be an external client", p)
		}
	default:
		return fmt.Errorf("packet %s: unknown origin", p)
	}
	w := c.Want
	switch w.Verdict {
	case Forwarded:
		if len(w.Backends) == 0 {
			return fmt.Errorf("forwarded with no backends")
		}
		for _, b := range w.Backends {
			if _, ok := topo.PodByIP(b.Addr()); !ok || !slices.Contains(topo.ServerPorts, int(b.Port())) {
				return fmt.Errorf("backend %s is not a pod address with a server port", b)
			}
		}
	case NotProxied:
		_, isPod := topo.PodByIP(p.Dst)
		routed := topo.ServiceCIDR.Contains(p.Dst) || topo.ExternalIPRange.Contains(p.Dst) || topo.LoadBalancerRange.Contains(p.Dst)
		if !isPod && !routed {
			return fmt.Errorf("not-proxied packet %s must go to a pod or to the service, external-IP or load-balancer ranges", p)
		}
		if !slices.Contains(topo.ServerPorts, p.Port) {
			return fmt.Errorf("not-proxied packet %s must use a port in ServerPorts", p)
		}
	case Rejected, Dropped:
	default:
		return fmt.Errorf("unknown verdict %d", w.Verdict)
	}
	return nil
}

// Names lists "scenario/step/check" for every check of the table, for
// building quirk lists and documentation.
func Names(scenarios []Scenario) []string {
	var out []string
	for _, sc := range scenarios {
		for _, st := range sc.Steps {
			for _, c := range st.Checks {
				out = append(out, strings.Join([]string{sc.Name, st.Name, c.Name}, "/"))
			}
		}
	}
	return out
}
