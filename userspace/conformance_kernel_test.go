//go:build linux

package userspace_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
)

// nsSockets opens every socket inside a network namespace. The proxier
// dials backends from its connection goroutines, which run on arbitrary
// threads (in the test binary's namespace), so the real-kernel test routes
// every socket call through netnstest.Exec. (A proxier running in a
// node's own namespace needs none of this: OSSockets is the default.)
type nsSockets struct {
	ns *netnstest.Namespace
}

func (s nsSockets) ListenTCP(addr netip.AddrPort) (ln net.Listener, err error) {
	err = netnstest.Exec(s.ns, func() (e error) { ln, e = userspace.OSSockets{}.ListenTCP(addr); return })
	return
}

func (s nsSockets) ListenUDP(addr netip.AddrPort) (c *net.UDPConn, err error) {
	err = netnstest.Exec(s.ns, func() (e error) { c, e = userspace.OSSockets{}.ListenUDP(addr); return })
	return
}

func (s nsSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (c net.Conn, err error) {
	err = netnstest.Exec(s.ns, func() (e error) { c, e = userspace.OSSockets{}.DialTCP(ctx, addr); return })
	return
}

func (s nsSockets) DialUDP(addr netip.AddrPort) (c *net.UDPConn, err error) {
	err = netnstest.Exec(s.ns, func() (e error) { c, e = userspace.OSSockets{}.DialUDP(addr); return })
	return
}

func kernelHarness(backend string, family v1.IPFamily) netnstest.KernelHarness {
	return netnstest.KernelHarness{
		Quirks: quirks(proxytest.DefaultTopology(family)),
		New: func(t *testing.T, env *netnstest.Env, _ proxytest.Options) proxy.Provider {
			var ipt xtables.Runner
			err := netnstest.Exec(env.Node, func() (err error) {
				ipt, err = xtables.New(xtables.RunnerConfig{Family: env.Topo.Family, Backend: backend})
				return err
			})
			if err != nil {
				t.Skipf("iptables %s backend unavailable: %v", backend, err)
			}
			p, err := userspace.NewProxier(userspace.Config{
				Common: engine.Common{
					NodeName:  env.Topo.NodeName,
					IPFamily:  env.Topo.Family,
					Conntrack: conntrack.New(),
				},
				HostIP:       env.Topo.NodeIP,
				ClusterCIDRs: []netip.Prefix{env.Topo.ClusterCIDR},
			}, userspace.Interfaces{IPTables: ipt, Sockets: nsSockets{ns: env.Node}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Cleanup first: after Close it returns ErrClosed.
				if err := netnstest.Exec(env.Node, func() error { return p.Cleanup(context.Background()) }); err != nil {
					t.Error(err)
				}
				p.Close()
			})
			return p
		},
	}
}

// TestConformanceKernel runs the conformance table with real packets
// through real proxy sockets and capture rules, in namespaces of its own
// (root only), on both iptables backends.
func TestConformanceKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes about two minutes; skipped with -short")
	}
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			t.Run(backend+"/"+string(fam), func(t *testing.T) {
				netnstest.RunKernel(t, fam, kernelHarness(backend, fam))
			})
		}
	}
}
