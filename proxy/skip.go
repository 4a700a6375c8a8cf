package proxy

import v1 "k8s.io/api/core/v1"

// ShouldSkipService reports whether a proxier must ignore svc entirely:
//
//   - a nil service;
//   - a headless service (cluster IP "None" or no cluster IP at all);
//   - an ExternalName service (DNS only, nothing to proxy);
//   - for an unnamed proxy (serviceProxyName ""), a service labelled
//     service.kubernetes.io/service-proxy-name (with any value, even empty):
//     the label hands the service to another proxy, as in kube-proxy;
//   - for a named proxy, every service whose label is not exactly
//     serviceProxyName, unlabelled ones included. A named proxy serves only
//     the services handed to it, so it can share a node with kube-proxy (or
//     another svcproxy) without both programming the same service; this is
//     what the informer and file sources select too, and what other named
//     proxies (e.g. multus-proxy) do.
//
// Whether the service has a cluster IP of a given IP family is decided per
// family by the service change tracker, not here.
func ShouldSkipService(svc *v1.Service, serviceProxyName string) bool {
	if svc == nil {
		return true
	}
	primary := svc.Spec.ClusterIP
	if primary == "" && len(svc.Spec.ClusterIPs) > 0 {
		// Objects that were never defaulted by an API server (files, tests)
		// may only carry spec.clusterIPs.
		primary = svc.Spec.ClusterIPs[0]
	}
	if primary == "" || primary == v1.ClusterIPNone {
		return true
	}
	if svc.Spec.Type == v1.ServiceTypeExternalName {
		return true
	}
	name, labelled := svc.Labels[LabelServiceProxyName]
	if serviceProxyName == "" {
		return labelled
	}
	return !labelled || name != serviceProxyName
}
