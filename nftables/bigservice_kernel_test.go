//go:build linux

package nftables_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// bigServiceObjects is one service whose endpoints fill its endpoint-map
// slot (4,096, in slices of 1,000 as the EndpointSlice controller cuts
// them), one of 2,500, and a load balancer with 3,000 source ranges:
// their element lists exceed what one netlink attribute can hold (its
// length is 16 bits), so the encoder must split them over several
// messages.
func bigServiceObjects(topo proxytest.Topology, edit func(i int) bool) proxytest.Objects {
	var objs proxytest.Objects
	base := topo.ClusterCIDR.Masked().Addr()
	next := 0
	for s, n := range []int{4096, 2500} {
		name := fmt.Sprintf("big-%d", s)
		objs.Services = append(objs.Services, proxytest.MakeService(topo, name, topo.ServiceIP(40+s),
			[]proxytest.ServicePortSpec{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: 8080}}, nil))
		var eps []proxytest.EndpointSpec
		for i := range n {
			next++
			state := proxytest.Ready
			if edit != nil && edit(i) {
				state = proxytest.NotReady
			}
			eps = append(eps, proxytest.EndpointSpec{Pod: proxytest.Pod{Name: fmt.Sprintf("p%d", i), IP: nthAddr(base, next), Node: "node-b"}, State: state})
		}
		for k := 0; k < len(eps); k += 1000 {
			objs.EndpointSlices = append(objs.EndpointSlices, proxytest.MakeSlice(topo, name, fmt.Sprint(k/1000),
				[]proxytest.SlicePortSpec{{Name: "http", Protocol: v1.ProtocolTCP, Port: 8080}}, eps[k:min(k+1000, len(eps))]...))
		}
	}
	// A load balancer with 3,000 source ranges, apart from each other:
	// its firewall rule's anonymous set holds 6,000 interval ends.
	ranges := make([]string, 0, 3000)
	src := netip.MustParseAddr("198.18.0.0")
	if topo.Family == v1.IPv6Protocol {
		src = netip.MustParseAddr("2001:db8:ee00::")
	}
	for i := range 3000 {
		ranges = append(ranges, netip.PrefixFrom(nthAddr(src, 2*i), src.BitLen()).String())
	}
	objs.Services = append(objs.Services, proxytest.MakeService(topo, "big-lb", topo.ServiceIP(45),
		[]proxytest.ServicePortSpec{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: 8080, NodePort: 30090}}, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = ranges
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: topo.LoadBalancerIP(2).String()}}
		}))
	objs.EndpointSlices = append(objs.EndpointSlices, proxytest.MakeSlice(topo, "big-lb", "0",
		[]proxytest.SlicePortSpec{{Name: "http", Protocol: v1.ProtocolTCP, Port: 8080}},
		proxytest.EndpointSpec{Pod: proxytest.Pod{Name: "lb-0", IP: nthAddr(base, next+1), Node: "node-b"}, State: proxytest.Ready}))
	return objs
}

func nthAddr(a netip.Addr, n int) netip.Addr {
	b := a.As16()
	for i, c := 15, n; c > 0 && i >= 0; i-- {
		c += int(b[i])
		b[i] = byte(c)
		c >>= 8
	}
	if a.Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// TestKernelNetlinkBigServices: services with thousands of endpoints are
// written over netlink (their endpoint-map elements split over several
// messages) as nft writes them, at a cold start and when a partial sync
// replaces some of their endpoints, and the kernel holds every element.
func TestKernelNetlinkBigServices(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			cfg := conformanceConfig(topo, proxytest.Options{})
			withTwin(t, fam, cfg, func(tw *twin) {
				objs := bigServiceObjects(topo, nil)
				tw.coldStart("big", cfg, objs)
				if got := strings.Count(tw.list(1), " : "+addrWord(fam)); got < 4096+2500 {
					t.Errorf("the kernel holds %d endpoint-map elements, want %d", got, 4096+2500)
				}
				before := tw.nl.batches.Load()
				tw.step("big", objs)
				// Every 7th endpoint not ready: the counts change, so
				// every element is rewritten, by a partial sync.
				tw.step("big/fewer", bigServiceObjects(topo, func(i int) bool { return i%7 == 3 }))
				if tw.nl.batches.Load() == before {
					t.Error("no partial sync went over netlink")
				}
				if s := nftables.NetlinkStatsOf(tw.p[1]); s.Refused != 0 || s.ToolTook != 0 {
					t.Errorf("netlink refused %d batches, nft took %d", s.Refused, s.ToolTook)
				}
			})
		})
	}
}

func addrWord(fam v1.IPFamily) string {
	if fam == v1.IPv6Protocol {
		return "fd" // the default topology's pod addresses
	}
	return "10."
}
