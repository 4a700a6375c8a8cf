package main

import (
	"context"
	"strings"
	"testing"
)

// Two services on one node: "mine" with pods in 10.244.0.0/16, "theirs"
// with pods of a second pod network (10.245.0.0/16) and labelled for
// another proxy.
const multiNetworkObjects = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses: [{type: InternalIP, address: 192.168.1.10}]
---
apiVersion: v1
kind: Service
metadata: {name: mine, namespace: default}
spec:
  clusterIP: 10.96.20.1
  clusterIPs: [10.96.20.1]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: mine-1, namespace: default, labels: {kubernetes.io/service-name: mine}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.20]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata:
  name: theirs
  namespace: default
  labels: {service.kubernetes.io/service-proxy-name: net2-proxy}
spec:
  clusterIP: 10.96.20.2
  clusterIPs: [10.96.20.2]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: theirs-1
  namespace: default
  labels: {kubernetes.io/service-name: theirs, service.kubernetes.io/service-proxy-name: net2-proxy}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.245.1.20]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: net2, namespace: default}
spec:
  clusterIP: 10.96.20.3
  clusterIPs: [10.96.20.3]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: net2-1, namespace: default, labels: {kubernetes.io/service-name: net2}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.245.1.30]
  conditions: {ready: true}
`

func TestDryRunMultiNetwork(t *testing.T) {
	path := writeFile(t, "objects.yaml", multiNetworkObjects)
	for _, tc := range []struct {
		name               string
		args               []string
		mine, theirs, net2 bool
	}{
		{"default proxy skips the other proxy's service", nil, true, false, true},
		// As kube-proxy's watch selector: a named proxy handles only the
		// services labelled with its name.
		{"named proxy handles only its own service", []string{"--service-proxy-name=net2-proxy"}, false, true, false},
		{"named proxy with its network excluded has nothing", []string{"--exclude-cluster-cidr=10.245.0.0/16", "--service-proxy-name=net2-proxy"}, false, false, false},
		// A service whose endpoints are all in an excluded CIDR belongs to
		// the other network's proxy and gets no rules at all.
		{"excluded endpoint CIDR of the other network", []string{"--exclude-cluster-cidr=10.245.0.0/16"}, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runInProcess(t, context.Background(), append([]string{"--objects-file", path, "--dry-run"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d:\n%s", code, errOut)
			}
			if got := strings.Contains(out, "10.96.20.1"); got != tc.mine {
				t.Errorf("rules for default/mine: %v, want %v\n%s", got, tc.mine, out)
			}
			if got := strings.Contains(out, "10.96.20.2"); got != tc.theirs {
				t.Errorf("rules for default/theirs: %v, want %v\n%s", got, tc.theirs, out)
			}
			if got := strings.Contains(out, "10.96.20.3"); got != tc.net2 {
				t.Errorf("rules for default/net2: %v, want %v\n%s", got, tc.net2, out)
			}
		})
	}
}

// The IPVS dry run prints the fakes' state: virtual servers with their
// real servers, the ipsets and the addresses bound to kube-ipvs0.
func TestDryRunIPVS(t *testing.T) {
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run", "--proxy-mode", "ipvs")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	for _, want := range []string{
		// The engine's DryRun: the plan + diff as the commands that would
		// apply it (ipvsadm, ipset, ip addr), then the iptables ruleset.
		"# minimal-proxy dry run: mode ipvs",
		"ipvsadm -A -t 10.96.10.10:80 -s rr",
		"ipvsadm -a -t 10.96.10.10:80 -r 10.244.1.2:8080 -m -w 1",
		"ipvsadm -A -u 10.96.0.10:53 -s rr -p 600",
		"ipvsadm -A -t 192.168.1.10:30080 -s rr",
		"ipset create KUBE-CLUSTER-IP",
		"ip addr add 10.96.10.10/32 dev kube-ipvs0",
		"*nat",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("IPVS dry run lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// A dry run needs no iptables (nor anything else on PATH).
func TestDryRunWithoutIPTables(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run")
	if code != exitOK || !strings.Contains(out, "*nat") {
		t.Fatalf("exit %d, stdout %d bytes; stderr:\n%s", code, len(out), errOut)
	}
}

// The userspace mode's dry run prints its plan (listeners and capture
// rules) like every other mode's, through the engines' shared DryRun.
func TestDryRunUserspace(t *testing.T) {
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run", "--proxy-mode", "userspace")
	if code != exitOK || !strings.Contains(out, "mode userspace") || !strings.Contains(out, "KUBE-PORTALS") {
		t.Fatalf("exit %d, want %d and a plan with capture rules; stdout:\n%s\nstderr:\n%s", code, exitOK, out, errOut)
	}
}
