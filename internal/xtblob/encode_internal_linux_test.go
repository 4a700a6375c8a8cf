package xtblob

import (
	"errors"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelHasRevision: the revision query tells a revision the kernel
// has from one it has not, for matches and targets of both families.
func TestKernelHasRevision(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	netnstest.InFreshNetns(t, func() {
		for _, fam := range []Family{IPv4, IPv6} {
			for _, tc := range []struct {
				target bool
				name   string
				rev    uint8
				has    bool
			}{
				{false, "conntrack", 3, true},
				{false, "conntrack", 200, false},
				{false, "no-such-match", 0, false},
				{true, "DNAT", 2, true},
				{true, "DNAT", 200, false},
				{true, "MARK", 2, true},
			} {
				err := kernelHasRevision(fam, tc.target, tc.name, tc.rev)
				if (err == nil) != tc.has || err != nil && !errors.Is(err, ErrUnsupported) {
					t.Errorf("family %d %s revision %d: %v, want it found: %v", fam, tc.name, tc.rev, err, tc.has)
				}
			}
		}
	})
}
