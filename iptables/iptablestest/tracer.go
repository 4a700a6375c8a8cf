package iptablestest

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// TracerConfig describes the node a Tracer simulates.
type TracerConfig struct {
	// NodeIPs are the addresses local to the node (addrtype LOCAL);
	// loopback addresses are always local.
	NodeIPs []netip.Addr
	// PodInterface is the interface traffic from local pods arrives on
	// (for example "cbr0" or "veth1234").
	PodInterface string
	// ExternalInterface is the node's uplink (for example "eth0").
	ExternalInterface string
	// IPSetMatch answers "-m set --match-set" matches; nil makes a rule
	// using one an error.
	IPSetMatch func(q IPSetQuery) (bool, error)
	// SourcePort is the traced packet's source port; zero means a rule
	// matching on the source port is an error.
	SourcePort int
}

// IPSetQuery asks whether a packet matches an ipset.
type IPSetQuery struct {
	// Set is the set name.
	Set string
	// Flags are the --match-set direction flags as written ("src", "dst").
	Flags []string
	// Addrs and Ports hold, for each flag, the packet's source or
	// destination address and port.
	Addrs []netip.Addr
	Ports []int
	// Protocol is the packet's protocol.
	Protocol v1.Protocol
}

type pathEnd int

const (
	endContinue pathEnd = iota
	endAccept
	endDrop
	endReject
	endReturn
)

type traceCtx struct {
	cfg  TracerConfig
	hook string
}

func (tc *traceCtx) sourcePort() (int, error) {
	if tc.cfg.SourcePort == 0 {
		return 0, fmt.Errorf("a rule matches the source port but TracerConfig.SourcePort is 0")
	}
	return tc.cfg.SourcePort, nil
}

func (tc *traceCtx) hookIs(hooks ...string) bool {
	for _, h := range hooks {
		if tc.hook == h {
			return true
		}
	}
	return false
}

func (tc *traceCtx) addrType(a netip.Addr) string {
	return "UNICAST"
}

type pktState struct {
	src, dst, origSrc, origDst netip.Addr
	dport, origDport           int
	proto                      string
	mark, ctmark               uint32
	dnat, snat, untracked      bool
	masqueraded                bool
	checkedRecent              bool
	recent                     map[string]bool
}

func (st *pktState) recordRecent(key string) {
	if st.recent == nil {
		st.recent = map[string]bool{}
	}
	st.recent[key] = true
}

func (st *pktState) hasRecent(key string) bool { return st.recent[key] }
