//go:build linux

package nftables

import (
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
)

// render writes cs into tx, in an order every reference is valid in:
// old stale chains deleted; table and containers declared; elements
// removed; chains flushed (going stale, or to be rewritten) and declared;
// affinity sets removed and added; rules written; elements added.
func render(tx *knftables.Transaction, cs *changeSet) {
	for _, n := range cs.deletes {
		tx.Delete(&knftables.Chain{Name: n})
	}
	if st := cs.declare; st != nil {
		tx.Add(&knftables.Table{Comment: ptr.To("rules for kube-proxy")})
		for _, c := range st.maps {
			if c.set {
				tx.Add(&knftables.Set{Name: c.name, Type: c.typ, Comment: ptr.To(c.comment)})
			} else if c.typeOf {
				tx.Add(&knftables.Map{Name: c.name, TypeOf: c.typ, Comment: ptr.To(c.comment)})
			} else {
				tx.Add(&knftables.Map{Name: c.name, Type: c.typ, Comment: ptr.To(c.comment)})
			}
		}
	}
	renderLocalhostDeclare(tx, cs.localhost)
	for _, e := range cs.elemDels {
		tx.Delete(element(e, false))
	}
	for i := range cs.epDels {
		tx.Delete(&knftables.Element{Map: cs.epDels[i].ctr().name(), Key: cs.epDels[i].keyText()})
	}
	for _, e := range cs.foreignDels {
		if e.container.isSet() {
			tx.Delete(&knftables.Element{Set: e.container.name(), Key: e.key})
		} else {
			tx.Delete(&knftables.Element{Map: e.container.name(), Key: e.key})
		}
	}
	for _, n := range cs.flushes {
		tx.Flush(&knftables.Chain{Name: n})
	}
	for _, w := range cs.writes {
		c := &knftables.Chain{Name: w.spec.name}
		if w.spec.comment != "" {
			c.Comment = ptr.To(w.spec.comment)
		}
		if b := w.spec.base; b != nil {
			if w.existed {
				// A base chain's hook and priority cannot change in place
				// (upstream's layout moved them between versions): the
				// same transaction deletes it and adds it again.
				tx.Flush(&knftables.Chain{Name: w.spec.name})
				tx.Delete(&knftables.Chain{Name: w.spec.name})
			}
			c.Type = ptr.To(knftables.BaseChainType(b.typ))
			c.Hook = ptr.To(knftables.BaseChainHook(b.hook))
			c.Priority = ptr.To(knftables.BaseChainPriority(b.priority))
			tx.Add(c)
			continue
		}
		tx.Add(c)
		if w.existed {
			tx.Flush(&knftables.Chain{Name: w.spec.name})
		}
	}
	for _, n := range cs.setDels {
		tx.Delete(&knftables.Set{Name: n})
	}
	for _, s := range cs.setAdds {
		tx.Add(&knftables.Set{
			Name:    s.name,
			Type:    s.typ,
			Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
			Timeout: ptr.To(s.timeout),
		})
	}
	for _, w := range cs.writes {
		for i := range w.spec.rules {
			r := &w.spec.rules[i]
			rule := &knftables.Rule{Chain: w.spec.name, Rule: r.String()}
			if comment := ruleComment(w.spec, i); comment != "" {
				rule.Comment = ptr.To(comment)
			}
			tx.Add(rule)
		}
	}
	for _, e := range cs.elemAdds {
		tx.Add(element(e, true))
	}
	for _, run := range cs.epAdds {
		for i := range run {
			e := &run[i]
			tx.Add(&knftables.Element{Map: e.ctr().name(), Key: e.keyText(), Value: e.valueText()})
		}
	}
	renderLocalhostRemovals(tx, cs.localhost)
}

// ruleComment is the comment of rule i of c: its own, and on the first
// rule the chain's content hash (which full syncs read back).
func ruleComment(c *chainSpec, i int) string { return string(appendRuleComment(nil, c, i)) }

// appendRuleComment appends ruleComment(c, i) to b.
func appendRuleComment(b []byte, c *chainSpec, i int) []byte {
	n := len(b)
	b = c.rules[i].appendComment(b)
	if i == 0 {
		if len(b) > n {
			b = append(b, ' ')
		}
		b = append(append(b, hashPrefix...), c.hash...)
	}
	return b
}

// element is e as nft text (the one place a planned element becomes
// text: the dry run and the nft path).
func element(e *elemSpec, withValue bool) *knftables.Element {
	el := &knftables.Element{Key: e.key.textFields(e.container.layout())}
	if e.container.isSet() {
		el.Set = e.container.name()
	} else {
		el.Map = e.container.name()
		if withValue {
			el.Value = []string{e.value.String()}
		}
	}
	if withValue && e.comment != "" {
		el.Comment = ptr.To(e.comment)
	}
	return el
}
