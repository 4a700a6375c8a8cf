package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControlPlaneHarness proves the harness alone: a real kube-apiserver in
// a fresh namespace, reached through it, serving the default "kubernetes"
// service from its own service CIDR.
func TestControlPlaneHarness(t *testing.T) {
	skipUnlessRoot(t)
	bins := buildE2EBinaries(t)
	_, inNS := newNamespace(t)
	cp := startControlPlane(t, bins, inNS, "10.95.0.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lastErr error
	for ctx.Err() == nil {
		svc, err := cp.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			if svc.Spec.ClusterIP != "10.95.0.1" {
				t.Fatalf("kubernetes service cluster IP = %s, want 10.95.0.1", svc.Spec.ClusterIP)
			}
			return
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("default/kubernetes service never appeared: %v", lastErr)
}
