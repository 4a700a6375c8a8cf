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
	var b [chainHashLen]byte
	return string(appendChainHash(b[:0], s))
}

const chainHashLen = 16

// appendChainHash appends chainHash of the concatenation of parts to dst,
// without building the concatenation or the whole encoding on the heap
// (it runs for every endpoint the tracker builds: 100,000 times in a
// 10,000-service cold start). base32 turns each 5 bytes into 8
// characters, so the first 16 characters of the sum's encoding are the
// encoding of its first 10 bytes.
func appendChainHash(dst []byte, parts ...string) []byte {
	var stack [256]byte
	in := stack[:0]
	for _, p := range parts {
		in = append(in, p...)
	}
	sum := sha256.Sum256(in)
	var enc [chainHashLen]byte
	base32.StdEncoding.Encode(enc[:], sum[:chainHashLen*5/8])
	return append(dst, enc[:]...)
}

// serviceChainNames are the four per-service-port chain names.
type serviceChainNames struct {
	cluster, local, external, firewall xtables.Chain
}

// makeServiceChainNames hashes servicePortName + lower-case protocol, as
// kube-proxy does ("ns/name:port" + "tcp").
func makeServiceChainNames(name proxy.ServicePortName) serviceChainNames {
	base := chainHash(name.String() + proxy.LowerProtocol(name.Protocol))
	return serviceChainNames{
		cluster:  xtables.Chain(prefixServiceCluster + base),
		local:    xtables.Chain(prefixServiceLocal + base),
		external: xtables.Chain(prefixServiceExt + base),
		firewall: xtables.Chain(prefixServiceFW + base),
	}
}

// endpointChainName hashes servicePortName + lower-case protocol + "ip:port".
func endpointChainName(name proxy.ServicePortName, endpoint string) xtables.Chain {
	var b [len(prefixEndpoint) + chainHashLen]byte
	out := append(b[:0], prefixEndpoint...)
	if name.Port == "" {
		out = appendChainHash(out, name.Namespace, "/", name.Name, proxy.LowerProtocol(name.Protocol), endpoint)
	} else {
		out = appendChainHash(out, name.Namespace, "/", name.Name, ":", name.Port, proxy.LowerProtocol(name.Protocol), endpoint)
	}
	return xtables.Chain(out)
}
