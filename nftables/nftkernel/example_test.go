//go:build linux

package nftkernel_test

import (
	"context"
	"log"
	"sync/atomic"

	"github.com/mdlayher/netlink"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// countingWriter counts the batches written: it embeds the writer and
// hands ctx and msgs on as it got them, so the engine writes as without
// it (and the encoder's buffers still go out without a copy).
type countingWriter struct {
	nftables.NetlinkWriter
	batches atomic.Int64
}

func (w *countingWriter) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	w.batches.Add(1)
	return w.NetlinkWriter.WriteBatch(ctx, msgs)
}

// The real Interfaces of a node, with the netlink writer wrapped to count
// its batches (the result depends on the machine: nft and the kernel must
// meet the nftables mode's requirements).
func ExampleNewInterfaces() {
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		log.Printf("nftables mode unavailable: %v", err)
		return
	}
	ifs.Netlink = &countingWriter{NetlinkWriter: ifs.Netlink}
	p, err := nftables.NewProxier(nftables.Config{Common: engine.Common{NodeName: "node-a"}}, ifs)
	if err != nil {
		log.Print(err)
		return
	}
	defer p.Close()
}
