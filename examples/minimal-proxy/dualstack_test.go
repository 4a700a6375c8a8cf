package main

import (
	"context"
	"strings"
	"testing"
)

const dualStackObjects = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses:
  - {type: InternalIP, address: 192.168.1.10}
  - {type: InternalIP, address: "fd00:1::10"}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.30.1
  clusterIPs: [10.96.30.1, "fd00:96::30:1"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-v4, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.2]
  conditions: {ready: true}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-v6, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: ["fd00:244:1::2"]
  conditions: {ready: true}
`

// A node with addresses of both families runs one engine per family: the
// dry run shows both plans.
func TestDryRunDualStack(t *testing.T) {
	path := writeFile(t, "objects.yaml", dualStackObjects)
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", path, "--dry-run",
		"--cluster-cidr", "10.244.0.0/16,fd00:244::/48")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	v4, v6, ok := strings.Cut(out, "# IPv6\n")
	if !ok || !strings.Contains(v4, "# IPv4\n") {
		t.Fatalf("dry run has no IPv4 and IPv6 sections:\n%s", out)
	}
	for _, c := range []struct{ section, want string }{
		{v4, "-d 10.96.30.1 --dport 80"},
		{v4, "--to-destination 10.244.1.2:8080"},
		{v4, "-s 10.244.0.0/16"},
		{v6, "-d fd00:96::30:1 --dport 80"},
		{v6, "--to-destination [fd00:244:1::2]:8080"},
		{v6, "-s fd00:244::/48"},
	} {
		if !strings.Contains(c.section, c.want) {
			t.Errorf("section lacks %q", c.want)
		}
	}
	if strings.Contains(v4, "fd00:96") || strings.Contains(v4, "fd00:244") || strings.Contains(v6, "10.244.1.2") {
		t.Errorf("a family's plan holds the other family's addresses")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
