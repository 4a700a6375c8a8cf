//go:build linux

package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/proxy"
)

// obsoleteBaseChains are base chains of the layout upstream kube-proxy
// used before v1.31 (and this engine before it followed v1.34), which
// hooked the firewall and cluster-IP checks elsewhere: a full sync deletes
// them when it finds them, so an older table is adopted without running
// those checks twice.
var obsoleteBaseChains = []string{"filter-prerouting", "filter-output-post-dnat"}

// chainObsoleteMarkMasq is the chain upstream v1.34 (and this engine
// before it followed v1.37) jumped to to mark a packet for masquerading;
// v1.37 writes the mark inline. Rules of an adopted older table still jump
// to it until their chains are rewritten, so a full sync flushes it in its
// last transaction (with the chains no service wants any more) and deletes
// it a moment later, as any stale chain.
const chainObsoleteMarkMasq = "mark-for-masquerade"

// Upstream kube-proxy's object names (pkg/proxy/nftables, v1.37), kept so
// that a node moves between the two in either direction.
const (
	chainFilterPreroutingPreDNAT = "filter-prerouting-pre-dnat"
	chainFilterOutputPreDNAT     = "filter-output-pre-dnat"
	chainFilterInput             = "filter-input"
	chainFilterForward           = "filter-forward"
	chainFilterOutput            = "filter-output"
	chainNATPrerouting           = "nat-prerouting"
	chainNATOutput               = "nat-output"
	chainNATPostrouting          = "nat-postrouting"

	chainServices               = "services"
	chainServiceEndpointsCheck  = "service-endpoints-check"
	chainNodePortEndpointsCheck = "nodeport-endpoints-check"
	chainReject                 = "reject-chain"
	chainClusterIPsCheck        = "cluster-ips-check"
	chainFirewallCheck          = "firewall-check"
	chainMasquerading           = "masquerading"

	mapServiceIPs          = "service-ips"
	mapServiceNodePorts    = "service-nodeports"
	mapNoEndpointServices  = "no-endpoint-services"
	mapNoEndpointNodePorts = "no-endpoint-nodeports"
	mapFirewallIPs         = "firewall-ips"
	setClusterIPs          = "cluster-ips"
	setNodePortIPs         = "nodeport-ips"
	setHairpin             = "hairpin-connections"

	prefixClusterChain  = "service-"
	prefixLocalChain    = "local-"
	prefixExternalChain = "external-"
	prefixFirewallChain = "firewall-"
	prefixEndpointChain = "endpoint-"
	prefixAffinitySet   = "affinity-"

	nameBaseMax = knftables.NameLengthMax - 16
)

// commentMax is the longest comment upstream v1.37 writes (knftables'
// CommentLengthMax): longer ones are cut, as upstream cuts them.
const commentMax = knftables.CommentLengthMax

// truncateComment cuts s to commentMax bytes.
func truncateComment(s string) string {
	if len(s) > commentMax {
		return s[:commentMax]
	}
	return s
}

// hashAndTruncate prefixes name with 8 characters of its own hash (so
// truncated or near-identical names stay unique and distinguishable).
func hashAndTruncate(name string) string {
	h := sha256.Sum256([]byte(name))
	name = base32.StdEncoding.EncodeToString(h[:])[:8] + "-" + name
	if len(name) > nameBaseMax {
		name = name[:nameBaseMax-3] + "..."
	}
	return name
}

// appendServiceNameBase appends "HASH-namespace/name/proto/port" (the
// base of a service port's chain names, as hashAndTruncate makes it) to
// dst, allocating nothing when dst and the stack have room (names of any
// length: append grows them).
func appendServiceNameBase(dst []byte, spn proxy.ServicePortName) []byte {
	var keyBuf [160]byte
	key := append(keyBuf[:0], spn.Namespace...)
	key = append(append(key, '/'), spn.Name...)
	key = append(append(key, '/'), proxy.LowerProtocol(spn.Protocol)...)
	key = append(append(key, '/'), spn.Port...)
	h := sha256.Sum256(key)
	var hash [56]byte // base32 of 32 bytes
	base32.StdEncoding.Encode(hash[:], h[:])
	start := len(dst)
	dst = append(append(append(dst, hash[:8]...), '-'), key...)
	if len(dst)-start > nameBaseMax {
		dst = append(dst[:start+nameBaseMax-3], "..."...)
	}
	return dst
}

// endpointNameBase is "HASH-namespace/name/proto/port__ip/port" (colons of
// IPv6 addresses become dots: chain names cannot hold colons).
func endpointNameBase(spn proxy.ServicePortName, endpoint string) string {
	ip, port, _ := net.SplitHostPort(endpoint)
	ip = strings.ReplaceAll(ip, ":", ".")
	return hashAndTruncate(spn.Namespace + "/" + spn.Name + "/" + proxy.LowerProtocol(spn.Protocol) + "/" + spn.Port + "__" + ip + "/" + port)
}

// isServiceObjectName reports a per-service chain or set name (all hold a
// "/"; the fixed names hold none).
func isServiceObjectName(name string) bool { return strings.Contains(name, "/") }

// hashPrefix starts the comment of the first rule of every chain the engine
// writes; the rest of it is a hash of the chain's content, so a full sync
// knows from one listing which chains already hold what it would write.
const hashPrefix = "svcproxy:"

func chainHash(base *baseChain, rules []ruleSpec) string {
	// FNV-1a (64 bits) over the same bytes hash/fnv was fed before, byte
	// for byte, computed inline: every full sync hashes every chain, and
	// the []byte conversions for hash.Hash's Write allocated per rule.
	h := fnvOffset64
	if base != nil {
		// A base chain's hook and priority are part of its content: a
		// table whose base chain hangs at another priority is rewritten.
		h = fnvString(h, base.typ)
		h = fnvString(h, " ")
		h = fnvString(h, base.hook)
		h = fnvString(h, " ")
		h = fnvString(h, base.priority)
		h = fnvByte(h, 2)
	}
	var scratch [256]byte
	for i := range rules {
		// The rule's nft text, rendered into a buffer on the stack.
		h = fnvBytes(h, rules[i].appendText(scratch[:0]))
		h = fnvByte(h, 0)
		h = fnvBytes(h, rules[i].appendComment(scratch[:0]))
		h = fnvByte(h, 1)
	}
	return strconv.FormatUint(h, 36)
}

const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime64 }

func fnvBytes(h uint64, s []byte) uint64 {
	for _, c := range s {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime64
	}
	return h
}

// hashFromComment extracts the content hash from a first rule's comment.
func hashFromComment(c *string) string {
	if c == nil {
		return ""
	}
	i := strings.LastIndex(*c, hashPrefix)
	if i < 0 {
		return ""
	}
	return (*c)[i+len(hashPrefix):]
}

// isNotFound reports a missing table or object, from nft (knftables'
// IsNotFound) or from knftables' netlink listing (ENOENT).
func isNotFound(err error) bool {
	return err != nil && (knftables.IsNotFound(err) || errors.Is(err, syscall.ENOENT))
}
