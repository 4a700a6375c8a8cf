package proxy

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// LowerProtocol is strings.ToLower of p ("tcp", "udp", "sctp"), as the
// kernel's tools and tables spell it, without allocating for the three
// protocols Kubernetes knows.
func LowerProtocol(p v1.Protocol) string {
	switch p {
	case v1.ProtocolTCP:
		return "tcp"
	case v1.ProtocolUDP:
		return "udp"
	case v1.ProtocolSCTP:
		return "sctp"
	}
	return strings.ToLower(string(p))
}
