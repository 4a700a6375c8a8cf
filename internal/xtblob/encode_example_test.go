package xtblob_test

import (
	"encoding/binary"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// Encoding one nat rule of a service: the entry's size, where its
// standard target's verdict is, and the chain the table writer must point
// that verdict at.
func ExampleEncoder_AppendRule() {
	enc := xtblob.NewEncoder(xtblob.IPv4)
	enc.Table = "nat"
	buf, ref, err := enc.AppendRule(nil, []byte(
		`-m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("entry bytes:", len(buf), "next_offset:", binary.NativeEndian.Uint16(buf[90:]))
	fmt.Println("jump:", string(ref.Jump), "verdict at:", ref.VerdictAt)

	_, _, err = enc.AppendRule(nil, []byte(`-m owner --uid-owner 0 -j ACCEPT`))
	fmt.Println(err)
	// Output:
	// entry bytes: 488 next_offset: 488
	// jump: KUBE-SVC-XPGD46QRK7WJZT7O verdict at: 480
	// xtblob: not supported in process: match "owner"
}
