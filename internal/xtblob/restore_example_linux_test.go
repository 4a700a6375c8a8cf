package xtblob_test

import (
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// Restore applies an iptables-restore --noflush input to the calling
// thread's network namespace; on ErrUnsupported (here, -E, which it does
// not take) nothing was written and the caller runs the tool instead.
func ExampleRestore() {
	input := []byte("*filter\n:KUBE-FORWARD - [0:0]\n-E KUBE-FORWARD KUBE-OLD\nCOMMIT\n")
	err := xtblob.Restore(xtblob.IPv4, input, xtblob.RestoreOptions{})
	var re *xtblob.RestoreError
	if errors.As(err, &re) {
		fmt.Println("line", re.Line, "of table", re.Table)
	}
	if errors.Is(err, xtblob.ErrUnsupported) {
		fmt.Println("run iptables-legacy-restore --noflush instead")
	}
	// Output:
	// line 3 of table filter
	// run iptables-legacy-restore --noflush instead
}
