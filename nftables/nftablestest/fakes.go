//go:build linux

package nftablestest

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Fake is knftables' Fake (the table as objects, Dump and ParseDump) with
// the shared fault vocabulary: the counted operations are "Run", "Check",
// "ListAll", "List", "ListRules", "ListElements", "ListCounters" and
// "Generation". A failed call changes nothing.
//
// It models the kernel's ruleset generation id (nftables.GenerationReader):
// every successful Run, the engine's or a test's "foreign" one, moves it
// by one. The fakes of one Fakes share it, as the families of one network
// namespace do.
type Fake struct {
	*knftables.Fake
	proxytest.Faults
	gen *atomic.Uint32
}

// NewFake returns an empty fake bound to the kube-proxy table of family.
func NewFake(family v1.IPFamily) *Fake {
	return newFake(family, new(atomic.Uint32))
}

func newFake(family v1.IPFamily, gen *atomic.Uint32) *Fake {
	return &Fake{Fake: knftables.NewFake(nftables.Family(family), nftables.TableName), gen: gen}
}

var _ nftables.GenerationReader = (*Fake)(nil)

// Generation returns the fake's ruleset generation: the number of
// successful Runs on it (and on the other fakes sharing it).
func (f *Fake) Generation() (uint32, error) {
	if err := f.Hit("Generation"); err != nil {
		return 0, err
	}
	return f.gen.Load(), nil
}

var _ knftables.Interface = (*Fake)(nil)

// Run runs tx against the fake's tables (all or nothing).
func (f *Fake) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := f.Hit("Run"); err != nil {
		return err
	}
	if err := f.Fake.Run(ctx, tx); err != nil {
		return err
	}
	f.gen.Add(1)
	return nil
}

// Check validates tx without applying it.
func (f *Fake) Check(ctx context.Context, tx *knftables.Transaction) error {
	if err := f.Hit("Check"); err != nil {
		return err
	}
	return f.Fake.Check(ctx, tx)
}

// ListAll lists the table's object names by type.
func (f *Fake) ListAll(ctx context.Context) (map[string][]string, error) {
	if err := f.Hit("ListAll"); err != nil {
		return nil, err
	}
	return f.Fake.ListAll(ctx)
}

// List lists the names of one type of object.
func (f *Fake) List(ctx context.Context, objectType string) ([]string, error) {
	if err := f.Hit("List"); err != nil {
		return nil, err
	}
	return f.Fake.List(ctx, objectType)
}

// ListRules lists a chain's rules (every chain's with chain "").
func (f *Fake) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	if err := f.Hit("ListRules"); err != nil {
		return nil, err
	}
	return f.Fake.ListRules(ctx, chain)
}

// ListElements lists a set's or map's elements.
func (f *Fake) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	if err := f.Hit("ListElements"); err != nil {
		return nil, err
	}
	return f.Fake.ListElements(ctx, objectType, name)
}

// ListCounters lists the table's counters.
func (f *Fake) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	if err := f.Hit("ListCounters"); err != nil {
		return nil, err
	}
	return f.Fake.ListCounters(ctx)
}

// Dump is knftables' Fake.Dump with each set's and map's elements sorted:
// the kernel keeps no order among them, but the fake lists them in the
// order they were added, so two tables written by different histories
// (an element deleted and added again, as the engine replaces an
// endpoint of an endpoint map) would dump differently.
func (f *Fake) Dump() string {
	lines := strings.Split(f.Fake.Dump(), "\n")
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && strings.HasPrefix(lines[j], "add element ") {
			j++
		}
		if j > i+1 {
			sort.Strings(lines[i:j])
		}
		i = max(j, i+1)
	}
	return strings.Join(lines, "\n")
}

// Listings is the number of list calls made (what a partial sync must not
// make).
func (f *Fake) Listings() int {
	return f.CallsOf("ListAll", "List", "ListRules", "ListElements", "ListCounters")
}

// LastOps is the number of operations of the last transaction run (0 if
// none).
func (f *Fake) LastOps() int {
	f.RLock()
	defer f.RUnlock()
	if f.LastTransaction == nil {
		return 0
	}
	return f.LastTransaction.NumOperations()
}

// Fakes is every fake an nftables Proxier drives.
type Fakes struct {
	// NFTables is the kube-proxy table of the proxier's family.
	NFTables *Fake
	// Other is the same table of the other family (Cleanup removes it).
	Other  *Fake
	family v1.IPFamily
}

// NewFakes returns empty fakes for a proxier of family.
func NewFakes(family v1.IPFamily) *Fakes {
	other := v1.IPv6Protocol
	if family == v1.IPv6Protocol {
		other = v1.IPv4Protocol
	}
	gen := new(atomic.Uint32)
	return &Fakes{NFTables: newFake(family, gen), Other: newFake(other, gen), family: family}
}

// Family is the proxier family the fakes were made for.
func (f *Fakes) Family() v1.IPFamily { return f.family }

// Interfaces returns the fakes as the engine's Interfaces.
func (f *Fakes) Interfaces() nftables.Interfaces {
	return nftables.Interfaces{NFTables: f.NFTables, OtherFamily: f.Other, Generation: f.NFTables}
}

// Dump renders the table of the proxier's family as nft text (knftables'
// Fake.Dump: one "add" command per object, sorted).
func (f *Fakes) Dump() string { return f.NFTables.Dump() }
