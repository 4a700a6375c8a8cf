package proxytest

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestScenariosValid(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := DefaultTopology(fam)
		scs := Scenarios(topo)
		if err := Validate(topo, scs); err != nil {
			t.Errorf("%s: %v", fam, err)
		}
		if n := len(Names(scs)); n < 60 {
			t.Errorf("%s: only %d checks", fam, n)
		}
	}
}
