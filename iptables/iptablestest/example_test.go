package iptablestest_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
)

// The Fake applies iptables-restore input and prints the state as
// iptables-save does.
func ExampleFake() {
	ctx := context.Background()
	fake := iptablestest.NewFake(v1.IPv4Protocol)
	var runner iptables.Runner = fake // what the engine is given

	err := runner.Restore(ctx, []byte(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
`))
	if err != nil {
		fmt.Println(err)
	}
	// A jump to a chain that does not exist is refused, as by the kernel.
	err = runner.Restore(ctx, []byte("*nat\n-A KUBE-SERVICES -j KUBE-SVC-NOPE\nCOMMIT\n"))
	fmt.Println(err)

	fmt.Print(fake.Dump())
	// Output:
	// iptables-restore: line 2 failed: no chain/target/match by that name: jump target "KUBE-SVC-NOPE" does not exist in table "nat" (line: "-A KUBE-SERVICES -j KUBE-SVC-NOPE")
	// *nat
	// :PREROUTING ACCEPT [0:0]
	// :INPUT ACCEPT [0:0]
	// :OUTPUT ACCEPT [0:0]
	// :POSTROUTING ACCEPT [0:0]
	// :KUBE-MARK-MASQ - [0:0]
	// :KUBE-SERVICES - [0:0]
	// -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
	// -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
	// COMMIT
}
