package filesource_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/filesource"
)

const objects = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints: [{addresses: [10.1.0.5], nodeName: node-a}]
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: not-for-us}
`

func Example() {
	dir, _ := os.MkdirTemp("", "filesource")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(path, []byte(objects), 0o644); err != nil {
		panic(err)
	}

	// Any proxy.Provider (an engine) goes here; a bare tracker shows what
	// arrives.
	tracker := changetracker.New(changetracker.Config{IPFamily: v1.IPv4Protocol, NodeName: "node-a"})
	src := filesource.New(path, tracker, filesource.Options{NodeName: "node-a"})
	if err := src.Load(context.Background()); err != nil {
		fmt.Println("skipped:", err)
	}
	u := tracker.Update()
	for name, eps := range u.Endpoints {
		fmt.Println(name, "->", u.Services[name], eps)
	}
	// Output:
	// skipped: 1 bad object(s) skipped; document 3 (line 18): Pod default/not-for-us: unsupported kind: Pod (want Service, EndpointSlice, Endpoints, Node or List)
	// shop/web:http -> 10.96.0.10:80/TCP [10.1.0.5:8080]
}
