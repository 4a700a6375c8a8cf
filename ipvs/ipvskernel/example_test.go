package ipvskernel_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
)

// Probe tells whether this kernel can run the IPVS engine, for falling
// back to the iptables engine (the result depends on the machine).
func ExampleProbe() {
	r := ipvskernel.Probe(ipvskernel.ProbeOptions{})
	if err := r.Usable("rr"); err != nil {
		fmt.Println("falling back to iptables:", err != nil)
		return
	}
	fmt.Println("IPVS", r.Version, "schedulers", r.Schedulers)
}
