package proxy_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
)

// A service with internalTrafficPolicy: Cluster and externalTrafficPolicy:
// Local, a node port, and topology hints requested through
// trafficDistribution: PreferClose.
func ExampleCategorizeEndpoints() {
	svc := &proxy.BaseServicePort{
		ClusterIPAddr:            netip.MustParseAddr("172.30.0.10"),
		PortNum:                  80,
		ProtocolValue:            v1.ProtocolTCP,
		NodePortNum:              30080,
		ExternalLocal:            true,
		TrafficDistributionValue: v1.ServiceTrafficDistributionPreferClose,
	}
	endpoint := func(ip string, local bool, zone string) proxy.Endpoint {
		return &proxy.BaseEndpoint{
			Addr: netip.MustParseAddr(ip), PortNum: 8080,
			Ready: true, Serving: true, Local: local,
			Zones: sets.New(zone),
		}
	}
	endpoints := []proxy.Endpoint{
		endpoint("10.1.0.5", false, "zone-a"),
		endpoint("10.1.1.7", true, "zone-b"), // on this node, hinted for another zone
		endpoint("10.1.2.9", false, "zone-b"),
	}
	nodeLabels := map[string]string{proxy.LabelTopologyZone: "zone-a"}

	cluster, local, reachable, hasAny := proxy.CategorizeEndpoints(endpoints, svc, "node-1", nodeLabels)
	fmt.Println("cluster:  ", cluster)
	fmt.Println("local:    ", local)
	fmt.Println("reachable:", reachable)
	fmt.Println("has any:  ", hasAny)
	// Output:
	// cluster:   [10.1.0.5:8080]
	// local:     [10.1.1.7:8080]
	// reachable: [10.1.0.5:8080 10.1.1.7:8080]
	// has any:   true
}

func ExampleShouldSkipService() {
	svc := &v1.Service{Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone}}
	fmt.Println("headless:", proxy.ShouldSkipService(svc, ""))
	svc = &v1.Service{Spec: v1.ServiceSpec{ClusterIP: "172.30.0.10"}}
	svc.Labels = map[string]string{proxy.LabelServiceProxyName: "multus-proxy"}
	fmt.Println("another proxy's:", proxy.ShouldSkipService(svc, ""))
	fmt.Println("our own:", proxy.ShouldSkipService(svc, "multus-proxy"))
	// Output:
	// headless: true
	// another proxy's: true
	// our own: false
}
