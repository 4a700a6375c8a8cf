package ipvs

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/proxy"
)

// dataplane is the node state of the proxier, built from the plans of all
// service ports with reference counts, so that two service ports sharing an
// address or a set entry keep it until both are gone.
type dataplane struct {
	vss     map[VirtualServerKey]*vsEntry
	addrs   map[netip.Addr]int
	entries map[setEntry]int
}

// vsEntry is one virtual server and the service ports that claim it; the
// first claim is the one programmed (two services asking for the same
// address:port/protocol is a conflict; the later one waits its turn).
type vsEntry struct {
	claims []vsClaim
}

// vsClaim points into its owner's plan (plans are never written once
// made), so the dataplane holds no copy of them, and ops may point at the
// active virtual server.
type vsClaim struct {
	owner proxy.ServicePortName
	pvs   *plannedVS
}

func newDataplane() *dataplane { return newDataplaneSized(0, 0, 0) }

// newDataplaneSized makes a dataplane with room for vss virtual servers,
// addrs addresses and entries set entries.
func newDataplaneSized(vss, addrs, entries int) *dataplane {
	return &dataplane{
		vss:     make(map[VirtualServerKey]*vsEntry, vss),
		addrs:   make(map[netip.Addr]int, addrs),
		entries: make(map[setEntry]int, entries),
	}
}

func (e *vsEntry) active() *plannedVS {
	if len(e.claims) == 0 {
		return nil
	}
	return e.claims[0].pvs
}

// diffSink receives what changes when a plan is added to or removed from a
// dataplane. A nil sink only updates the dataplane.
type diffSink interface {
	// vsChanged: the programmed virtual server of key went from old to new
	// (either may be nil).
	vsChanged(old, new *plannedVS)
	addrChanged(addr netip.Addr, add bool)
	entryChanged(e setEntry, add bool)
	// conflict: spn asked for a virtual server another service port holds.
	conflict(spn proxy.ServicePortName, key VirtualServerKey, holder proxy.ServicePortName)
}

// replace swaps the plan of spn from old to new (either may be nil) and
// reports the changes of the programmed state to sink.
func (d *dataplane) replace(spn proxy.ServicePortName, old, new *servicePlan, sink diffSink) {
	if new != nil {
		for i := range new.vss {
			pvs := &new.vss[i]
			key := pvs.vs.Key()
			e := d.vss[key]
			if e == nil {
				e = &vsEntry{}
				d.vss[key] = e
			}
			idx := slices.IndexFunc(e.claims, func(c vsClaim) bool { return c.owner == spn })
			switch {
			case idx < 0:
				// claims stay sorted by owner, so the same services always
				// resolve a conflict the same way, whatever the order of events
				at, _ := slices.BinarySearchFunc(e.claims, spn, func(c vsClaim, n proxy.ServicePortName) int { return compareSPN(c.owner, n) })
				e.claims = slices.Insert(e.claims, at, vsClaim{owner: spn, pvs: pvs})
				switch {
				case len(e.claims) == 1:
					if sink != nil {
						sink.vsChanged(nil, pvs)
					}
				case at == 0:
					if sink != nil {
						sink.vsChanged(e.claims[1].pvs, pvs)
						sink.conflict(e.claims[1].owner, key, spn)
					}
				default:
					if sink != nil {
						sink.conflict(spn, key, e.claims[0].owner)
					}
				}
			case idx == 0:
				prev := e.claims[0].pvs
				e.claims[0].pvs = pvs
				if sink != nil {
					sink.vsChanged(prev, pvs)
				}
			default:
				e.claims[idx].pvs = pvs
			}
		}
		for _, a := range new.addrs {
			d.addrs[a]++
			if d.addrs[a] == 1 && sink != nil {
				sink.addrChanged(a, true)
			}
		}
		for _, se := range new.entries {
			d.entries[se]++
			if d.entries[se] == 1 && sink != nil {
				sink.entryChanged(se, true)
			}
		}
	}
	if old != nil {
		for i := range old.vss {
			key := old.vss[i].vs.Key()
			if new != nil && slices.ContainsFunc(new.vss, func(p plannedVS) bool { return p.vs.Key() == key }) {
				continue
			}
			e := d.vss[key]
			if e == nil {
				continue
			}
			idx := slices.IndexFunc(e.claims, func(c vsClaim) bool { return c.owner == spn })
			if idx < 0 {
				continue
			}
			prev := e.claims[idx].pvs
			e.claims = slices.Delete(e.claims, idx, idx+1)
			if idx == 0 && sink != nil {
				sink.vsChanged(prev, e.active())
			}
			if len(e.claims) == 0 {
				delete(d.vss, key)
			}
		}
		for _, a := range old.addrs {
			if n := d.addrs[a]; n > 1 {
				d.addrs[a] = n - 1
			} else if n == 1 {
				delete(d.addrs, a)
				if sink != nil {
					sink.addrChanged(a, false)
				}
			}
		}
		for _, se := range old.entries {
			if n := d.entries[se]; n > 1 {
				d.entries[se] = n - 1
			} else if n == 1 {
				delete(d.entries, se)
				if sink != nil {
					sink.entryChanged(se, false)
				}
			}
		}
	}
}

func compareSPN(a, b proxy.ServicePortName) int {
	switch {
	case a.Namespace != b.Namespace:
		return strings.Compare(a.Namespace, b.Namespace)
	case a.Name != b.Name:
		return strings.Compare(a.Name, b.Name)
	case a.Port != b.Port:
		return strings.Compare(a.Port, b.Port)
	}
	return strings.Compare(string(a.Protocol), string(b.Protocol))
}
