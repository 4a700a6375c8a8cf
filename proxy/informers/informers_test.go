package informers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
)

const livenessTimeout = 30 * time.Second

// recorder is a proxy.Provider that records every handler call.
type recorder struct {
	mu     sync.Mutex
	events []string
}

var _ proxy.Provider = (*recorder)(nil)

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) has(e string) bool { return slices.Contains(r.snapshot(), e) }

func (r *recorder) OnServiceAdd(s *v1.Service) { r.add("service add %s/%s", s.Namespace, s.Name) }
func (r *recorder) OnServiceUpdate(o, s *v1.Service) {
	r.add("service update %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnServiceDelete(s *v1.Service) { r.add("service delete %s/%s", s.Namespace, s.Name) }
func (r *recorder) OnServiceSynced()              { r.add("services synced") }
func (r *recorder) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	r.add("slice add %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceUpdate(o, s *discovery.EndpointSlice) {
	r.add("slice update %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	r.add("slice delete %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSlicesSynced()       { r.add("slices synced") }
func (r *recorder) OnNodeAdd(n *v1.Node)          { r.add("node add %s", n.Name) }
func (r *recorder) OnNodeUpdate(o, n *v1.Node)    { r.add("node update %s", n.Name) }
func (r *recorder) OnNodeDelete(n *v1.Node)       { r.add("node delete %s", n.Name) }
func (r *recorder) OnNodeSynced()                 { r.add("node synced") }
func (r *recorder) Sync(context.Context) error    { return nil }
func (r *recorder) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(livenessTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func service(ns, name string, lbls map[string]string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.0.0.1",
			Ports:     []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
}

func slice(ns, name, svc string, extra map[string]string) *discovery.EndpointSlice {
	l := map[string]string{discovery.LabelServiceName: svc}
	for k, v := range extra {
		l[k] = v
	}
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}
}

// listSelectors returns the label and field selectors of the list calls
// made for resource.
func listSelectors(client *fake.Clientset, resource string) []string {
	var out []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == resource {
			r := a.(k8stesting.ListAction).GetListRestrictions()
			out = append(out, fmt.Sprintf("labels=%q fields=%q", r.Labels.String(), r.Fields.String()))
		}
	}
	return out
}

func start(t *testing.T, client *fake.Clientset, opts Options, withNode bool) *recorder {
	t.Helper()
	opts.Logger = testr.New(t)
	factory, err := NewInformerFactory(client, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	var nodeFactory informers.SharedInformerFactory
	if withNode {
		nodeFactory, err = NewNodeInformerFactory(client, 0, "node-a")
		if err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	opts.Stop = stop
	rec := &recorder{}
	if err := Register(factory, nodeFactory, rec, opts); err != nil {
		t.Fatal(err)
	}
	factory.Start(stop)
	if nodeFactory != nil {
		nodeFactory.Start(stop)
	}
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
		if nodeFactory != nil {
			nodeFactory.Shutdown()
		}
	})
	eventually(t, "services and slices synced", func() bool { return rec.has("services synced") && rec.has("slices synced") })
	if withNode {
		eventually(t, "node synced", func() bool { return rec.has("node synced") })
	}
	return rec
}

func TestRegisterDeliversAndFilters(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		service("ns", "plain", nil),
		service("ns", "other-proxy", map[string]string{proxy.LabelServiceProxyName: "other"}),
		slice("ns", "plain-1", "plain", nil),
		slice("ns", "headless-1", "headless", map[string]string{proxy.LabelHeadless: ""}),
		slice("ns", "other-1", "other-proxy", map[string]string{proxy.LabelServiceProxyName: "other"}),
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
	)
	rec := start(t, client, Options{}, true)

	got := rec.snapshot()
	// The initial list arrives before each Synced call.
	want := []string{"service add ns/plain", "slice add ns/plain-1", "node add node-a"}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in %q", w, got)
		}
	}
	for _, e := range got {
		if strings.Contains(e, "other") || strings.Contains(e, "headless") {
			t.Errorf("filtered object delivered: %q", e)
		}
	}
	order := func(a, b string) {
		if slices.Index(got, a) > slices.Index(got, b) {
			t.Errorf("%q came after %q: %q", a, b, got)
		}
	}
	order("service add ns/plain", "services synced")
	order("slice add ns/plain-1", "slices synced")
	order("node add node-a", "node synced")

	// The watches carry kube-proxy's selectors.
	wantSvc := `labels="!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name" fields="spec.clusterIP!=None"`
	if sel := listSelectors(client, "services"); len(sel) == 0 || sel[0] != wantSvc {
		t.Errorf("service list selectors %q, want %q", sel, wantSvc)
	}
	wantSlice := `labels="!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name" fields=""`
	if sel := listSelectors(client, "endpointslices"); len(sel) == 0 || sel[0] != wantSlice {
		t.Errorf("endpointslice list selectors %q, want %q", sel, wantSlice)
	}
	wantNode := `labels="" fields="metadata.name=node-a"`
	if sel := listSelectors(client, "nodes"); len(sel) == 0 || sel[0] != wantNode {
		t.Errorf("node list selectors %q, want %q", sel, wantNode)
	}

	// Watch events flow through.
	svc := service("ns", "plain", nil)
	svc.Spec.Ports[0].Port = 8080
	if _, err := client.CoreV1().Services("ns").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service update", func() bool { return rec.has("service update ns/plain") })
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, slice("ns", "plain-2", "plain", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "slice add", func() bool { return rec.has("slice add ns/plain-2") })
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(ctx, "plain-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "slice delete", func() bool { return rec.has("slice delete ns/plain-1") })
	if err := client.CoreV1().Services("ns").Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service delete", func() bool { return rec.has("service delete ns/plain") })
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{v1.LabelTopologyZone: "z1"}}}
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node update", func() bool { return rec.has("node update node-a") })

	for _, e := range []string{"services synced", "slices synced", "node synced"} {
		if c := countOf(rec.snapshot(), e); c != 1 {
			t.Errorf("%q called %d times, want once", e, c)
		}
	}
}

func countOf(events []string, e string) int {
	n := 0
	for _, x := range events {
		if x == e {
			n++
		}
	}
	return n
}

func TestServiceProxyName(t *testing.T) {
	client := fake.NewClientset(
		service("ns", "plain", nil),
		service("ns", "mine", map[string]string{proxy.LabelServiceProxyName: "net2"}),
		service("ns", "theirs", map[string]string{proxy.LabelServiceProxyName: "net3"}),
	)
	rec := start(t, client, Options{ServiceProxyName: "net2"}, false)
	got := rec.snapshot()
	if !slices.Contains(got, "service add ns/mine") {
		t.Errorf("own service not delivered: %q", got)
	}
	for _, e := range got {
		if strings.Contains(e, "plain") || strings.Contains(e, "theirs") {
			t.Errorf("service of another proxy delivered: %q", e)
		}
	}
	want := `labels="!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name in (net2)" fields="spec.clusterIP!=None"`
	if sel := listSelectors(client, "services"); len(sel) == 0 || sel[0] != want {
		t.Errorf("selectors %q, want %q", sel, want)
	}
	if slices.Contains(got, "node synced") {
		t.Error("node synced without a node factory")
	}
}

func TestInvalidOptions(t *testing.T) {
	client := fake.NewClientset()
	if _, err := NewInformerFactory(client, 0, Options{ServiceProxyName: "not a label value!"}); err == nil {
		t.Error("invalid service proxy name accepted")
	}
	if _, err := NewNodeInformerFactory(client, 0, ""); err == nil {
		t.Error("empty node name accepted")
	}
	f, _ := NewInformerFactory(client, 0, Options{})
	if err := Register(f, nil, nil, Options{}); err == nil {
		t.Error("nil provider accepted")
	}
	if err := Register(nil, nil, &recorder{}, Options{}); err == nil {
		t.Error("nil factory accepted")
	}
}

func endpoints(ns, name string, subsets ...v1.EndpointSubset) *v1.Endpoints {
	return &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subsets: subsets}
}

func subset(ip string, port int32) v1.EndpointSubset {
	return v1.EndpointSubset{
		Addresses: []v1.EndpointAddress{{IP: ip}},
		Ports:     []v1.EndpointPort{{Port: port, Protocol: v1.ProtocolTCP}},
	}
}

func TestUseEndpoints(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		service("ns", "web", nil),
		endpoints("ns", "web", subset("10.1.0.1", 80), subset("10.1.0.2", 81)),
		slice("ns", "web-slice", "web", nil), // ignored: we watch Endpoints
	)
	rec := start(t, client, Options{UseEndpoints: true}, false)
	got := rec.snapshot()
	for _, w := range []string{"slice add ns/web-legacy-0-ipv4", "slice add ns/web-legacy-1-ipv4"} {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in %q", w, got)
		}
	}
	if slices.Contains(got, "slice add ns/web-slice") {
		t.Error("EndpointSlice delivered with UseEndpoints")
	}

	// Dropping a subset updates the remaining slice and deletes the other.
	if _, err := client.CoreV1().Endpoints("ns").Update(ctx, endpoints("ns", "web", subset("10.1.0.9", 80)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "legacy update", func() bool {
		return rec.has("slice update ns/web-legacy-0-ipv4") && rec.has("slice delete ns/web-legacy-1-ipv4")
	})
	if err := client.CoreV1().Endpoints("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "legacy delete", func() bool { return rec.has("slice delete ns/web-legacy-0-ipv4") })
	if sel := listSelectors(client, "endpoints"); len(sel) == 0 || !strings.Contains(sel[0], "!service.kubernetes.io/headless") {
		t.Errorf("endpoints list selectors %q", sel)
	}
}

func TestDeletedFinalStateUnknownAndBadTypes(t *testing.T) {
	rec := &recorder{}
	r := &registrar{provider: rec, log: testr.New(t)}
	svc := service("ns", "gone", nil)
	r.serviceDelete(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: svc})
	r.sliceDelete(cache.DeletedFinalStateUnknown{Key: "ns/s", Obj: slice("ns", "s", "gone", nil)})
	r.nodeDelete(cache.DeletedFinalStateUnknown{Key: "node-a", Obj: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}})
	r.endpointsDelete(cache.DeletedFinalStateUnknown{Key: "ns/e", Obj: endpoints("ns", "e", subset("10.1.0.1", 80))})
	want := []string{"service delete ns/gone", "slice delete ns/s", "node delete node-a", "slice delete ns/e-legacy-0-ipv4"}
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}

	var wrong runtime.Object = &v1.Pod{}
	r.serviceAdd(wrong)
	r.sliceUpdate(slice("ns", "s", "x", nil), wrong)
	r.nodeDelete(cache.DeletedFinalStateUnknown{Key: "x", Obj: wrong})
	r.endpointsAdd(nil)
	if got := len(rec.snapshot()); got != len(want) {
		t.Errorf("bad-typed events reached the provider: %q", rec.snapshot())
	}
	if got := r.skipped.Load(); got != 4 {
		t.Errorf("skipped = %d, want 4", got)
	}
}

func TestApplyEndpointsChange(t *testing.T) {
	rec := &recorder{}
	changetracker.ApplyEndpointsChange(rec, nil, endpoints("ns", "a", subset("10.0.0.1", 80), subset("fd00::1", 80)))
	changetracker.ApplyEndpointsChange(rec, endpoints("ns", "a", subset("10.0.0.1", 80), subset("fd00::1", 80)), endpoints("ns", "a", subset("fd00::2", 80)))
	want := []string{
		"slice add ns/a-legacy-0-ipv4", "slice add ns/a-legacy-1-ipv6",
		// subset 0 is now IPv6: a new slice; both old ones go.
		"slice add ns/a-legacy-0-ipv6", "slice delete ns/a-legacy-0-ipv4", "slice delete ns/a-legacy-1-ipv6",
	}
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
}
