package engine_test

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
)

// A tiny engine of one's own: it "programs" a table of VIP:port → ready
// backends. The base gives it the handlers, the loop, metrics and health.
func Example_ownEngine() {
	table := map[string]string{} // our "dataplane"
	apply := func(_ context.Context, req *engine.Request) (engine.Result, error) {
		u := req.Update
		for name, svc := range u.Services {
			if !req.Full && !u.ChangedServices.Has(name.NamespacedName) {
				continue // a partial sync writes only what changed
			}
			var backends []string
			for _, ep := range u.Endpoints[name] {
				if ep.IsReady() {
					backends = append(backends, ep.String())
				}
			}
			table[fmt.Sprintf("%s:%d", svc.ClusterIP(), svc.Port())] = strings.Join(backends, ",")
		}
		return engine.Result{Writes: len(table)}, nil
	}
	base, err := engine.New(engine.Common{NodeName: "node-1"}, engine.Hooks{Name: "table", Apply: apply})
	if err != nil {
		panic(err)
	}
	base.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       v1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	})
	ready, port := true, int32(8080)
	base.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.244.1.5"}, Conditions: discovery.EndpointConditions{Ready: &ready}}},
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: &port, Protocol: ptr(v1.ProtocolTCP)}},
	})
	base.OnServiceSynced()
	base.OnEndpointSlicesSynced()
	if err := base.Sync(context.Background()); err != nil { // or base.Run(ctx)
		panic(err)
	}
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k, "->", table[k])
	}
	fmt.Println("full:", base.Stats().Last.Full)
	// Output:
	// 10.96.0.10:80 -> 10.244.1.5:8080
	// full: true
}

func ptr[T any](v T) *T { return &v }
