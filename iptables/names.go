package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// The fixed chains only this engine writes, named as kube-proxy's iptables
// mode names them, so that switching between kube-proxy and this engine
// (either way) leaves no duplicate rules behind. Those other engines share
// (KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-FORWARD,
// KUBE-PROXY-FIREWALL, the canaries) are package xtables'.
const (
	ChainKubeExternalServices xtables.Chain = "KUBE-EXTERNAL-SERVICES"
	ChainKubeNodePorts        xtables.Chain = "KUBE-NODEPORTS"
)

// Prefixes of the per-service chains (all in the nat table).
const (
	prefixServiceCluster = "KUBE-SVC-"
	prefixServiceLocal   = "KUBE-SVL-"
	prefixServiceExt     = "KUBE-EXT-"
	prefixServiceFW      = "KUBE-FW-"
	prefixEndpoint       = "KUBE-SEP-"
)

// isServiceChain reports whether chain is one of the per-service chains
// this engine (or kube-proxy) creates.
func isServiceChain(chain string) bool {
	return strings.HasPrefix(chain, prefixServiceCluster) ||
		strings.HasPrefix(chain, prefixServiceLocal) ||
		strings.HasPrefix(chain, prefixServiceExt) ||
		strings.HasPrefix(chain, prefixServiceFW) ||
		strings.HasPrefix(chain, prefixEndpoint)
}

// chainHash is the first 16 characters of base32(sha256(s)), the suffix
// kube-proxy uses in its chain names.
func chainHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// serviceChainNames are the four per-service-port chain names.
type serviceChainNames struct {
	cluster, local, external, firewall xtables.Chain
}

// makeServiceChainNames hashes servicePortName + lower-case protocol, as
// kube-proxy does ("ns/name:port" + "tcp").
func makeServiceChainNames(name proxy.ServicePortName) serviceChainNames {
	base := chainHash(name.String() + strings.ToLower(string(name.Protocol)))
	return serviceChainNames{
		cluster:  xtables.Chain(prefixServiceCluster + base),
		local:    xtables.Chain(prefixServiceLocal + base),
		external: xtables.Chain(prefixServiceExt + base),
		firewall: xtables.Chain(prefixServiceFW + base),
	}
}

// endpointChainName hashes servicePortName + lower-case protocol + "ip:port".
func endpointChainName(name proxy.ServicePortName, endpoint string) xtables.Chain {
	return xtables.Chain(prefixEndpoint + chainHash(name.String()+strings.ToLower(string(name.Protocol))+endpoint))
}
