package xtblob

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// Verify checks, after input was applied (by Restore or by the tool),
// that the kernel holds what it wrote: every user chain the input
// declares (and does not delete), whose whole content the input gives,
// is read back from the kernel and compared entry by entry (counters
// aside) with
//   - the input's rules for it, encoded as Restore encodes them: the
//     kernel state was not changed behind the writer, nor written
//     otherwise than meant;
//   - the rules the standard tool lists for it (listings: each table's
//     iptables-legacy-save -t output, taken after the write), encoded the
//     same way: the tool reads the process's bytes as the rules that make
//     them, so iptables-legacy-save, -C and -D see what the input said.
//
// Chains the input changes only line by line (-I, -D in a chain it does
// not declare) and the built-in chains are not checked. It holds the
// xtables lock while it reads (RestoreOptions.LockFile, LockWait). A
// difference is a *MismatchError (errors.Is ErrMismatch); a line of a
// listing the encoder does not know is one too (the tool lists a rule the
// engines do not write). Other errors (the lock, reading a table) say
// nothing about the tables.
func Verify(fam Family, input []byte, listings map[string][]byte, opts RestoreOptions) error {
	if fam != IPv4 && fam != IPv6 {
		return fmt.Errorf("xtblob: unknown family %d", fam)
	}
	p := opts.parse(fam, input)
	chains := p.checkedChains()
	if len(chains) == 0 {
		return nil
	}
	want, simple := p.appendOnly(chains)
	if !simple {
		return verifyApplied(fam, input, chains, listings, opts)
	}
	k, err := openKernel(fam)
	if err != nil {
		return err
	}
	defer k.close()
	p.encode(opts.Workers, p.encoders(fam, &opts))
	defer p.free()
	var diffs []string
	for name, set := range chains {
		l := listings[name]
		if l == nil {
			return fmt.Errorf("xtblob: no listing of table %s", name)
		}
		t, err := k.readTable(name)
		if err != nil {
			return fmt.Errorf("xtblob: reading table %s: %w", name, err)
		}
		compareDirect(&diffs, "as the input wrote it", t, p, name, want[name], false)
		lp := parseInput(fam, chainInput(l, map[string]map[string]bool{name: set}))
		lwant, _ := lp.appendOnly(map[string]map[string]bool{name: set})
		lp.encode(opts.Workers, lp.encoders(fam, &opts))
		listed := lwant[name]
		for c := range set {
			if _, ok := listed[c]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s/%s: not in the tool's listing", name, c))
			}
		}
		compareDirect(&diffs, "as the tool lists it", t, lp, name, listed, true)
		lp.free()
		freeBig(t.mem)
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return &MismatchError{Chains: diffs}
	}
	return nil
}

// compareDirect compares each chain of rules (its rules as encoded by p,
// in order) with the chain table t holds.
func compareDirect(diffs *[]string, what string, t *table, p *plan, tname string, rules map[string][]int32, listed bool) {
	t.srcs = append(t.srcs[:1], p.arenas...)
	for c, idx := range rules {
		ci, ok := t.lookup(c)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s/%s: missing (%s)", tname, c, what))
			continue
		}
		ch := &t.chains[ci]
		if int(ch.n) != len(idx) {
			*diffs = append(*diffs, fmt.Sprintf("%s/%s: %d rules, expected %d (%s)", tname, c, ch.n, len(idx), what))
			continue
		}
		q := ch.first
		for n, i := range idx {
			e := &p.encs[i]
			kr := &t.rules[q]
			d := ""
			if e.failed {
				d = fmt.Sprintf("rule %d does not encode: %v", n+1, p.encErr[i])
			} else if jump := p.str(e.jump); jump != "" {
				// A jump to a user chain (most rules): compared by the
				// chain's name, without looking it up.
				if kr.kind != kindJump || kr.size != e.size || t.chains[kr.jump].name != jump ||
					!sameHead(t.lay, t.fam, t.entry(kr), t.srcs[e.src][e.off:e.off+e.size], listed) {
					d = fmt.Sprintf("rule %d differs", n+1)
				}
			} else if r, err := t.newRule(e, ""); err != nil {
				d = fmt.Sprintf("rule %d: %v", n+1, err)
			} else if !sameEntry(t, kr, t, &r, listed) {
				d = fmt.Sprintf("rule %d differs", n+1)
			}
			if d != "" {
				*diffs = append(*diffs, fmt.Sprintf("%s/%s: %s (%s)", tname, c, d, what))
				break
			}
			q = t.rules[q].next
		}
	}
}

// verifyApplied is Verify for an input that changes a declared chain
// otherwise than by appending to it: the input's lines for the checked
// chains, and the tool's listing of them, are applied to tables read back
// from the kernel, and compared with them.
func verifyApplied(fam Family, input []byte, chains map[string]map[string]bool, listings map[string][]byte, opts RestoreOptions) error {
	k, err := openKernel(fam)
	if err != nil {
		return err
	}
	defer k.close()
	kernelTables := map[string]*table{}
	defer freeTables(kernelTables)
	for name := range chains {
		t, err := k.readTable(name)
		if err != nil {
			return fmt.Errorf("xtblob: reading table %s: %w", name, err)
		}
		kernelTables[name] = t
	}
	var diffs []string

	meant, free, err := k.applied(fam, chainInput(input, chains), &opts)
	defer free()
	if err != nil {
		return fmt.Errorf("xtblob: applying the input to the tables read back: %w", err)
	}
	compareTables(&diffs, "as the input wrote it", kernelTables, meant, chains, false)

	var listed bytes.Buffer
	for name := range chains {
		l := listings[name]
		if l == nil {
			return fmt.Errorf("xtblob: no listing of table %s", name)
		}
		listed.Write(l)
		if len(l) > 0 && l[len(l)-1] != '\n' {
			listed.WriteByte('\n')
		}
	}
	tool, freeTool, err := k.applied(fam, chainInput(listed.Bytes(), chains), &opts)
	defer freeTool()
	var re *RestoreError
	switch {
	case errors.As(err, &re) && errors.Is(err, ErrUnsupported):
		diffs = append(diffs, fmt.Sprintf("%s: the tool lists a rule the process does not write: %v", re.Table, re.Err))
	case err != nil:
		return fmt.Errorf("xtblob: applying the tool's listing to the tables read back: %w", err)
	default:
		compareTables(&diffs, "as the tool lists it", kernelTables, tool, chains, true)
	}
	if len(diffs) > 0 {
		return &MismatchError{Chains: diffs}
	}
	return nil
}

// applied reads the tables data names from the kernel and applies data to
// them in memory (nothing is written). free releases the tables and the
// encoded rules they point into.
func (k *kernel) applied(fam Family, data []byte, opts *RestoreOptions) (map[string]*table, func(), error) {
	tables := map[string]*table{}
	p := parseInput(fam, data)
	p.encode(opts.Workers, p.encoders(fam, opts))
	free := func() {
		freeTables(tables)
		p.free()
	}
	if err := p.firstUnsupported(); err != nil {
		return nil, free, err
	}
	if err := p.apply(tables, k.readTable, ""); err != nil {
		return nil, free, err
	}
	return tables, free, nil
}

func freeTables(tables map[string]*table) {
	for _, t := range tables {
		freeBig(t.mem)
	}
}
