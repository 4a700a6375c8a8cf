//go:build linux

package nftables

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// nftablesDrifted runs the drift hook (tests only).
func NftablesDriftedForTest(p *Proxier) (bool, error) { return p.p.drifted(context.Background()) }

// KeepPlannedRules makes p keep the rules of the plans it records
// (released on commit otherwise), for TypedEncodingMismatches.
func KeepPlannedRules(p *Proxier) { p.p.keepRules = true }

// TypedEncodingMismatches encodes every rule of the per-service chains p
// last planned twice, typed (addRule) and as the encoder did before the
// rules were typed (their nft text parsed back and marshalled by
// google/nftables), and lists the rules whose messages differ, or which
// only one of the two encodes. n counts the rules compared.
func TypedEncodingMismatches(p *Proxier) (mismatches []string, n int) {
	fam := p.p.family()
	for _, sp := range p.p.plans {
		for ci := range sp.chains {
			c := &sp.chains[ci]
			for i := range c.rules {
				r := &c.rules[i]
				comment := ruleComment(c, i)
				typed, old := newNLEncoder(fam), newNLEncoder(fam)
				errTyped := typed.addRule(c.name, r, []byte(comment))
				exprs, errOld := old.textRule(r.String())
				if errOld == nil {
					old.textAddRule(c.name, exprs, comment)
				}
				n++
				switch {
				case (errTyped == nil) != (errOld == nil):
					mismatches = append(mismatches, c.name+": "+r.String()+": typed "+errString(errTyped)+", text "+errString(errOld))
				case errTyped == nil && !sameMessages(typed, old):
					mismatches = append(mismatches, c.name+": "+r.String()+": messages differ")
				}
			}
		}
	}
	return mismatches, n
}

// TypedElementMismatches encodes every element of the plans p recorded
// (and of its fixed part) twice, added and deleted: typed, and as the
// encoder did before elements were typed (their nft text parsed back);
// it lists the elements whose messages differ, or which only one of the
// two encodes. n counts the elements compared.
func TypedElementMismatches(p *Proxier) (mismatches []string, n int) {
	fam := p.p.family()
	var elems []elemSpec
	for _, sp := range p.p.plans {
		elems = append(elems, sp.elems...)
	}
	if p.p.static != nil {
		elems = append(elems, p.p.static.elems...)
	}
	for _, el := range elems {
		if el.container.isData() {
			// Newer than the text encoder: TestEndpointMapElemRoundTrips
			// and TestKernelNetlinkEquivalence (nft's own) check them.
			continue
		}
		te := textElem{container: el.container.name(), key: el.key.text(el.container.layout()),
			value: el.value.String(), comment: el.comment, set: el.container.isSet()}
		for _, add := range []bool{true, false} {
			typ := uint16(unix.NFT_MSG_DELSETELEM)
			if add {
				typ = unix.NFT_MSG_NEWSETELEM
			}
			typed, old := newNLEncoder(fam), newNLEncoder(fam)
			errTyped := typed.elements(typ, []*elemSpec{&el}, add)
			errOld := old.textElements(typ, []textElem{te}, add)
			n++
			what := fmt.Sprintf("%s: %s : %s (add %v)", te.container, te.key, te.value, add)
			switch {
			case (errTyped == nil) != (errOld == nil):
				mismatches = append(mismatches, what+": typed "+errString(errTyped)+", text "+errString(errOld))
			case errTyped == nil && !sameMessages(typed, old):
				mismatches = append(mismatches, what+": messages differ")
			}
		}
	}
	return mismatches, n
}

func errString(err error) string {
	if err == nil {
		return "encoded"
	}
	return err.Error()
}

func sameMessages(a, b *nlEncoder) bool {
	if len(a.msgs) != len(b.msgs) {
		return false
	}
	for i := range a.msgs {
		if a.msgs[i].Header != b.msgs[i].Header || string(a.msgs[i].Data) != string(b.msgs[i].Data) {
			return false
		}
	}
	return true
}

// RecordedPlanForTest is the plan p recorded for service ns/name (an
// opaque pointer, compared across syncs: the same one means the full sync
// took it as it was), or nil.
func RecordedPlanForTest(p *Proxier, ns, name string) any {
	sp := p.p.plans[types.NamespacedName{Namespace: ns, Name: name}]
	if sp == nil {
		return nil
	}
	return sp
}

// SpoilRecordedChainForTest makes p's record of chain wrong (another
// content hash) without touching the table: a fault in the engine's own
// record.
func SpoilRecordedChainForTest(p *Proxier, chain string) bool {
	if _, ok := p.p.state.chains[chain]; !ok {
		return false
	}
	p.p.state.chains[chain] = "spoiled"
	return true
}

// ArenasInUse is how many bytes of p's netlink arenas are handed out and
// not given back.
func ArenasInUse(p *Proxier) int64 { return p.p.nl.arenas.Stats().InUse }
