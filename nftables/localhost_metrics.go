//go:build linux

package nftables

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// LocalhostRejectedPackets reads the named counters of the localhost
// node-port rejections (Config.LocalhostNodePorts) from nft, the
// kube-proxy table of family: one entry per counter present, for
// metrics.NewLocalhostNodePortRejectedCollector. A missing table is no
// entries and no error.
func LocalhostRejectedPackets(ctx context.Context, nft knftables.Interface, family v1.IPFamily) ([]metrics.LocalhostNodePortRejected, error) {
	counters, err := nft.ListCounters(ctx)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []metrics.LocalhostNodePortRejected
	for _, proto := range localhostRejectableProtocols {
		for _, c := range counters {
			if c != nil && c.Name == LocalhostRejectCounter(proto) && c.Packets != nil {
				out = append(out, metrics.LocalhostNodePortRejected{Family: family, Protocol: proto, Packets: *c.Packets})
			}
		}
	}
	return out, nil
}
