//go:build linux

package main

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLocalhostNodePortsBinary runs the binary (root, in a namespace of
// its own) in the nftables mode on demo.yaml, whose default/shop has node
// port 30080 and endpoints 10.244.1.3:8080 and 10.244.2.3:8080 (servers on
// the namespace's lo here). With
// --feature-gates=KubeProxyNFTablesLocalhostNodePorts=true and 127.0.0.0/8
// among --nodeport-addresses, a connection to 127.0.0.1:30080 inside the
// namespace reaches an endpoint through the localhost proxy, and the
// listeners (30080, 30443, 30081: demo.yaml's TCP node ports with
// endpoints) show in the metrics; without the gate (v1.37's default)
// nothing listens there and the connection is refused.
func TestLocalhostNodePortsBinary(t *testing.T) {
	skipUnlessRoot(t)
	if err := probeNFTables(); err != nil {
		t.Skipf("no usable nftables here: %v", err)
	}
	for _, tc := range []struct {
		name string
		gate string
		want string // "" : refused
	}{
		{"gate on", "KubeProxyNFTablesLocalhostNodePorts=true", "endpoint 10.244."},
		{"gate off", "KubeProxyNFTablesLocalhostNodePorts=false", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, inNS := newNamespace(t)
			for _, ep := range []string{"10.244.1.3", "10.244.2.3"} {
				if err := inNS(func() error {
					if out, err := exec.Command("ip", "addr", "add", ep+"/32", "dev", "lo").CombinedOutput(); err != nil {
						return errors.New(string(out))
					}
					ln, err := net.Listen("tcp4", ep+":8080")
					if err != nil {
						return err
					}
					t.Cleanup(func() { ln.Close() })
					go func() {
						for {
							c, err := ln.Accept()
							if err != nil {
								return
							}
							c.Write([]byte("endpoint " + ep))
							c.Close()
						}
					}()
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			p := startProxy(t, inNS, "minimal-proxy", "--objects-file=demo.yaml", "--proxy-mode=nftables",
				"--feature-gates="+tc.gate, "--nodeport-addresses=127.0.0.0/8,0.0.0.0/0", "--v=2")
			p.waitHealthy(t)
			ask := func() (string, error) {
				var got string
				err := inNS(func() error {
					c, err := net.DialTimeout("tcp4", "127.0.0.1:30080", 2*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(2 * time.Second))
					buf := make([]byte, 64)
					n, _ := c.Read(buf)
					got = string(buf[:n])
					return nil
				})
				return got, err
			}
			got, err := ask()
			if tc.want == "" {
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("127.0.0.1:30080 answered %q (%v), want refused", got, err)
				}
			} else {
				if err != nil || !strings.HasPrefix(got, tc.want) {
					t.Errorf("127.0.0.1:30080 answered %q (%v), want %q…", got, err, tc.want)
				}
				// Polled (bounded: 30 s, 2 s a request): at a load of 30 one
				// scrape can outlast its client's timeout.
				const listeners = `kubeproxy_nftables_localhost_nodeport_listeners{ip_family="IPv4"} 3`
				var body string
				var err error
				for deadline := time.Now().Add(30 * time.Second); ; {
					_, body, err = p.get(p.metrics, "/metrics")
					if (err == nil && strings.Contains(body, listeners)) || time.Now().After(deadline) {
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
				if err != nil || !strings.Contains(body, listeners) {
					var lines []string
					for _, l := range strings.Split(body, "\n") {
						if strings.Contains(l, "localhost") {
							lines = append(lines, l)
						}
					}
					t.Errorf("metrics lack the listener (%v):\n%s", err, strings.Join(lines, "\n"))
				}
				if !strings.Contains(body, "# TYPE kubeproxy_nftables_localhost_nodeport_rejected_packets_total counter") {
					t.Errorf("metrics lack the rejected-packets collector")
				}
			}
			p.stop(t)
		})
	}
}
