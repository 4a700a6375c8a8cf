package userspace_test

import (
	"context"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// DryRun prints the plan, opens and writes nothing, and the next sync
// applies it in full.
func TestDryRun(t *testing.T) {
	fakes := userspacetest.NewFakes(v1.IPv4Protocol)
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a"}, HostIP: netip.MustParseAddr("192.168.50.10"),
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	svc := nodePortService()
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	p.OnServiceAdd(svc)
	p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	got, err := p.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := `# userspace IPv4: capture iptables, listen 0.0.0.0, host IP 192.168.50.10
service ns/web:http
  set cluster: 10.244.1.2:8080
  set local: 10.244.1.2:8080
  socket TCP proxy port for the cluster set (to open)
  socket TCP proxy port for the local set (to open)
  rule nat KUBE-PORTALS-CONTAINER -d 10.96.0.10 --dport 80: redirect to the cluster set's proxy port
  rule nat KUBE-PORTALS-HOST -d 10.96.0.10 --dport 80: redirect to the cluster set's proxy port
  rule nat KUBE-PORTALS-CONTAINER -s 10.244.0.0/16 -d 198.51.100.1 --dport 80: redirect to the cluster set's proxy port
  rule nat KUBE-PORTALS-CONTAINER -d 198.51.100.1 --dport 80: redirect to the local set's proxy port
  rule nat KUBE-PORTALS-HOST -d 198.51.100.1 --dport 80: redirect to the cluster set's proxy port
  rule nat KUBE-NODEPORT-CONTAINER -s 10.244.0.0/16 (local destination) --dport 30080: redirect to the cluster set's proxy port
  rule nat KUBE-NODEPORT-CONTAINER (local destination) --dport 30080: redirect to the local set's proxy port
  rule nat KUBE-NODEPORT-HOST (local destination) --dport 30080: redirect to the cluster set's proxy port
`
	if got != want {
		t.Errorf("DryRun:\n%s\nwant:\n%s", got, want)
	}
	if n := fakes.IPTables.CallsOf("Restore", "EnsureRule", "EnsureChain"); n != 0 || fakes.Sockets.CallsOf("ListenTCP", "ListenUDP") != 0 {
		t.Errorf("DryRun touched the node: iptables %v, sockets %v", fakes.IPTables.Calls(), fakes.Sockets.Calls())
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); !st.Last.Full || st.Last.Result.Writes == 0 {
		t.Errorf("sync after a dry run: %+v, want a full sync that writes", st.Last)
	}
	if len(userspace.Listeners(p)) != 2 {
		t.Errorf("listeners after the sync: %v", userspace.Listeners(p))
	}
}
