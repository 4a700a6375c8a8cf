package conntrack_test

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy/conntrack"
)

// A Filter selects UDP entries; the iptables engine builds them from a
// sync's results and hands them to a Cleaner in one batch.
func ExampleFilter() {
	f := conntrack.Filter{OrigDst: netip.MustParseAddr("10.96.0.10"), ReplySrc: netip.MustParseAddr("10.244.1.5")}
	fmt.Println(f)
	// Output: udp orig-dst=10.96.0.10 orig-dport=0 reply-src=10.244.1.5
}
