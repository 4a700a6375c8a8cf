// Package winkernel is reserved for kube-proxy's Windows mode ("kernelspace"):
// Host Networking Service (HNS) load-balancer policies with DSR and a source
// VIP, driven through Microsoft's hnslib.
//
// Status: not implemented yet. No Proxier is exported, so nothing can be
// mistaken for a working engine; examples/minimal-proxy refuses
// --proxy-mode kernelspace with a message saying so. The engine will follow
// the shape of the other engines (a Config value, an HNS interface declared
// here with a real implementation in hns_windows.go and a not-supported one
// elsewhere, a stateful fake and tracer in winkernel/hnstest, and the
// conformance table of proxy/proxytest).
package winkernel
