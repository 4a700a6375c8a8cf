package proxy

// TEMPORARY stubs (lead); the core helper replaces them and deletes this file.

import v1 "k8s.io/api/core/v1"

func CategorizeEndpoints(endpoints []Endpoint, svc ServicePort, nodeName string, nodeLabels map[string]string) (clusterEndpoints, localEndpoints, allReachableEndpoints []Endpoint, hasAnyEndpoints bool) {
	panic("unimplemented")
}
func ShouldSkipService(svc *v1.Service, serviceProxyName string) bool { panic("unimplemented") }
func NewDualStack(ipv4, ipv6 Provider) Provider                       { panic("unimplemented") }
