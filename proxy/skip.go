package proxy

import v1 "k8s.io/api/core/v1"

// ShouldSkipService reports whether a proxier must ignore svc entirely:
//
//   - a nil service;
//   - a headless service (cluster IP "None" or no cluster IP at all);
//   - an ExternalName service (DNS only, nothing to proxy);
//   - a service labelled service.kubernetes.io/service-proxy-name, unless
//     serviceProxyName is not empty and equals the label's value (the label
//     hands the service to another proxy; an empty label value still does).
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
	if name, labelled := svc.Labels[LabelServiceProxyName]; labelled {
		return serviceProxyName == "" || name != serviceProxyName
	}
	return false
}
