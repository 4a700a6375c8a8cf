//go:build linux

package iptables_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestLocalhostNodePortsKernel: on a real kernel (both backends, a netns
// of its own with route_localnet reset to the kernel's 0), a node port
// answers on 127.0.0.1 from the node with Config.LocalhostNodePorts (the
// engine sets route_localnet) and not without it (the connection is
// refused: nothing listens there and the rules leave 127.0.0.0/8 alone).
func TestLocalhostNodePortsKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, tc := range []struct {
		backend string
		on      bool
	}{{xtables.BackendNFT, true}, {xtables.BackendNFT, false}, {xtables.BackendLegacy, true}, {xtables.BackendLegacy, false}} {
		on := tc.on
		t.Run(tc.backend+"/"+map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			env := netnstest.NewEnv(t, topo)
			pod := topo.Pods()[0]
			var unavailable error // t.Skip may not be called on Exec's goroutine
			err := netnstest.Exec(env.Node, func() error {
				ipt, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: tc.backend})
				if err != nil {
					unavailable = err
					return nil
				}
				sys := NewSysctl() // this namespace's /proc/sys
				if err := sys.Set(SysctlRouteLocalnet, 0); err != nil {
					return err
				}
				cfg := conformanceConfig(topo, proxytest.Options{})
				cfg.NodePortAddresses = nil // every local address, loopback included
				cfg.LocalhostNodePorts = on
				p, err := NewProxier(cfg, Interfaces{IPTables: ipt})
				if err != nil {
					return err
				}
				p.OnServiceSynced()
				p.OnEndpointSlicesSynced()
				p.OnServiceAdd(svc("ns", "np", "10.96.0.40", nodePort(30080)))
				p.OnEndpointSliceAdd(slice("ns", "np", "", ep{ip: pod.IP.String(), node: topo.NodeName}))
				if err := p.Sync(context.Background()); err != nil {
					return err
				}
				// A full resync over the correct ruleset (KUBE-FIREWALL,
				// its jumps) finds nothing to rewrite.
				p.RequestFullSync()
				if err := p.Sync(context.Background()); err != nil {
					return err
				}
				if st := p.Stats(); !st.Last.Full || st.Last.Result.Writes != 0 {
					t.Errorf("full resync over a correct ruleset: %+v, want a full sync writing nothing", st.Last)
				}
				t.Logf("full resync over a correct ruleset wrote %d lines", p.Stats().Last.Result.Writes)
				v, err := sys.Get(SysctlRouteLocalnet)
				if err != nil {
					return err
				}
				if want := map[bool]int{true: 1, false: 0}[on]; v != want {
					t.Errorf("route_localnet = %d, want %d", v, want)
				}
				c, err := net.DialTimeout("tcp4", "127.0.0.1:30080", 3*time.Second)
				if !on {
					if err == nil {
						c.Close()
						t.Errorf("127.0.0.1:30080 connected with localhost node ports off")
					}
					return nil
				}
				if err != nil {
					t.Errorf("127.0.0.1:30080: %v, want the node port's backend", err)
					return nil
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				data, _ := io.ReadAll(io.LimitReader(c, 512))
				a, err := netnstest.ParseAnswer(string(data))
				if err != nil {
					t.Errorf("127.0.0.1:30080: %v", err)
					return nil
				}
				if a.Name != pod.Name || a.Local != netip.AddrPortFrom(pod.IP, 80) {
					t.Errorf("127.0.0.1:30080 answered by %+v, want %s on %s:80", a, pod.Name, pod.IP)
				}
				if a.Client.IsLoopback() {
					t.Errorf("backend saw client %s, want it masqueraded", a.Client)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if unavailable != nil {
				t.Skipf("iptables %s backend unavailable: %v", tc.backend, unavailable)
			}
		})
	}
}
