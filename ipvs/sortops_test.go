package ipvs

import (
	"math/rand"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestSortOps: the index sort and in-place permutation order ops exactly
// as a stable sort of the values by kind and target.
func TestSortOps(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		ops := make(opList, rng.Intn(60))
		for i := range ops {
			ops[i] = op{
				kind:   opKind(rng.Intn(int(opReapRS) + 1)),
				vs:     &VirtualServer{Address: netip.AddrFrom4([4]byte{10, 96, 0, byte(rng.Intn(4))}), Protocol: v1.ProtocolTCP, Port: uint16(80 + rng.Intn(2))},
				rs:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(rng.Intn(4))}), 8080),
				weight: int32(i), // the original position
			}
		}
		want := slices.Clone(ops)
		slices.SortStableFunc(want, func(a, b op) int {
			if a.kind != b.kind {
				return int(a.kind) - int(b.kind)
			}
			return compareOp(&a, &b)
		})
		sortOps(ops)
		for i := range ops {
			if ops[i] != want[i] {
				t.Fatalf("round %d: position %d is %v (from %d), want %v (from %d)", round, i, ops[i].String(), ops[i].weight, want[i].String(), want[i].weight)
			}
		}
	}
}
