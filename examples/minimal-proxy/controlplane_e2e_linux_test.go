package main

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkKubernetesService waits (bounded) for the API server's default
// "kubernetes" Service and checks that it took want, the first address
// of the API server's own service range: the harness's control plane
// serves through the namespace from the range it was given. Every e2e
// cluster checks it (startE2ECluster), one per mode, IP family and
// kube-apiserver version, so no test of its own starts control planes
// only for this.
func checkKubernetesService(t *testing.T, cp *controlPlane, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lastErr error
	for ctx.Err() == nil {
		svc, err := cp.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			if svc.Spec.ClusterIP != want {
				t.Fatalf("kubernetes service cluster IP = %s, want %s", svc.Spec.ClusterIP, want)
			}
			return
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("default/kubernetes service never appeared: %v", lastErr)
}

// TestE2EAPIServerComesLate starts the proxy before the API server exists:
// it retries with a clear log line and /healthz answers 503; once etcd and
// kube-apiserver are up and a Service appears, it syncs, /healthz turns
// 200, and the Service is programmed. Root; its own namespace.
func TestE2EAPIServerComesLate(t *testing.T) {
	skipUnlessRoot(t)
	bins := buildE2EBinaries(t, e2eKubeFor(v1.IPv4Protocol))
	_, inNS := newNamespace(t)
	files := prepareControlPlane(t)

	p := startProxy(t, inNS, "minimal-proxy", "--kubeconfig="+files.kubeconfig, "--hostname-override=node-late",
		"--iptables-min-sync-period=100ms")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(readFile(p.logPath), "Cannot reach the API server") {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("no retry log line while the API server is missing:\n%s", tail(readFile(p.logPath), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body, err := p.get(p.healthz, "/healthz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/healthz before any sync = %d %q %v, want 503", code, body, err)
	}

	cp := startPreparedControlPlane(t, files, bins, inNS, "10.96.0.0/16")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// /healthz also needs this node's Node (kube-proxy 1.34: an unknown
	// node is not eligible).
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "default"},
		Spec:       v1.ServiceSpec{ClusterIP: "10.96.7.7", Ports: []v1.ServicePort{{Name: "http", Port: 80}}},
	}
	if _, err := cp.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitHealthy(t)
	deadline = time.Now().Add(30 * time.Second)
	for {
		var out []byte
		_ = inNS(func() error {
			var err error
			out, err = exec.Command("iptables-save").CombinedOutput()
			return err
		})
		// No endpoints: the filter table rejects it.
		if strings.Contains(string(out), `"default/late:http has no endpoints"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("default/late not programmed within 30s of the API server starting:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.stop(t)
}
