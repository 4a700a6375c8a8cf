package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestShouldSkipService(t *testing.T) {
	base := func(f func(*v1.Service)) *v1.Service {
		s := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
				Ports: []v1.ServicePort{{Port: 80}},
			},
		}
		if f != nil {
			f(s)
		}
		return s
	}
	label := func(v string) func(*v1.Service) {
		return func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: v} }
	}
	tests := []struct {
		name      string
		svc       *v1.Service
		proxyName string
		skip      bool
	}{
		{"nil service is skipped", nil, "", true},
		{"plain ClusterIP service is proxied", base(nil), "", false},
		{"headless service is skipped", base(func(s *v1.Service) {
			s.Spec.ClusterIP = v1.ClusterIPNone
			s.Spec.ClusterIPs = []string{v1.ClusterIPNone}
		}), "", true},
		{"service without cluster IP is skipped", base(func(s *v1.Service) { s.Spec.ClusterIP = ""; s.Spec.ClusterIPs = nil }), "", true},
		{"service with only spec.clusterIPs is proxied", base(func(s *v1.Service) { s.Spec.ClusterIP = "" }), "", false},
		{"ExternalName service is skipped", base(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }), "", true},
		{"NodePort service is proxied", base(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }), "", false},
		{"service of another proxy is skipped", base(label("other")), "", true},
		{"service with an empty proxy-name label is skipped", base(label("")), "", true},
		{"service of another named proxy is skipped by a named proxy", base(label("other")), "mine", true},
		{"service of this proxy is proxied", base(label("mine")), "mine", false},
		{"unlabelled service is left to the default proxy by a named proxy", base(nil), "mine", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShouldSkipService(tc.svc, tc.proxyName); got != tc.skip {
				t.Errorf("ShouldSkipService = %v, want %v", got, tc.skip)
			}
		})
	}
}
