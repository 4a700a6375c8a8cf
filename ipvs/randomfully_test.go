package ipvs_test

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// noRandomFully is a Runner that says MASQUERADE --random-fully is missing
// (and accepts it all the same, being the fake underneath).
type noRandomFully struct{ *xtablestest.Fake }

func (noRandomFully) HasRandomFully() bool { return false }

// As kube-proxy v1.37 (no HasRandomFully any more): the IPVS engine's
// iptables rule for service traffic requiring SNAT masquerades with
// --random-fully whatever the Runner says.
func TestMasqueradeAlwaysRandomFully(t *testing.T) {
	e := newEnv(t, config(engine.Common{}))
	ifs := e.f.Interfaces()
	ifs.IPTables = noRandomFully{e.ipt}
	cfg := e.cfg
	p, err := ipvs.NewProxier(cfg, ifs)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	e.sync(t)
	masq := 0
	for _, l := range strings.Split(e.ipt.Dump(), "\n") {
		// (The hairpin rule over KUBE-LOOP-BACK is a plain MASQUERADE in
		// v1.37 too.)
		if strings.Contains(l, "requiring SNAT") {
			masq++
			if !strings.HasSuffix(l, "-j MASQUERADE --random-fully") {
				t.Errorf("masquerade rule without --random-fully: %s", l)
			}
		}
	}
	if masq == 0 {
		t.Fatalf("no MASQUERADE rule in:\n%s", e.ipt.Dump())
	}
}
