//go:build linux

package nftables_test

import (
	"errors"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// TestKernelVersionGate: NewInterfaces refuses this host exactly when
// CheckHostVersions does, with the *VersionError. hack/matrix.sh sets
// SVCPROXY_EXPECT_NFTABLES (refused on bullseye: kernel 5.10, nft 0.9.8;
// accepted on bookworm and trixie) so that a misread version fails.
func TestKernelVersionGate(t *testing.T) {
	inFreshNetns(t, func() {
		gate := nftables.CheckHostVersions()
		var refusal *nftables.VersionError
		refused := errors.As(gate, &refusal)
		if gate != nil && !refused {
			t.Fatalf("cannot read this host's versions: %v", gate)
		}
		if expect := os.Getenv("SVCPROXY_EXPECT_NFTABLES"); expect != "" && refused != (expect == "refused") {
			t.Fatalf("SVCPROXY_EXPECT_NFTABLES=%s, but the version check gave %v", expect, gate)
		}
		_, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
		var got *nftables.VersionError
		switch {
		case refused && !errors.As(err, &got):
			t.Fatalf("NewInterfaces on a host below the requirements (%v) = %v, want a *VersionError", gate, err)
		case refused:
			t.Logf("refused: %v", err)
		case err != nil:
			t.Fatalf("NewInterfaces: %v", err)
		}
	})
}
