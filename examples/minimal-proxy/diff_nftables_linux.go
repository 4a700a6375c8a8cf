package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// planLister turns a family's plan (nft -f input) into nft's listing of
// the table it makes.
type planLister func(ctx context.Context, family v1.IPFamily, plan string) (string, error)

// diffNFTablesPlan compares the plan (a dry run's nft -f input) with the
// node's kube-proxy tables and returns the nft commands that would make
// the node's tables the plan's. Both sides are compared as nft lists
// them: the plan is loaded into a table of a scratch network namespace
// (listPlan) and listed back, so spellings that nft prints its own way
// never count as a change. Elements of dynamic sets (the affinity sets,
// filled by packets) are not compared.
func diffNFTablesPlan(ctx context.Context, plan string, run toolRunner, listPlan planLister) ([]string, error) {
	return diffPlanFamilies(plan, func(family v1.IPFamily, text string) ([]string, error) {
		planned, err := listPlan(ctx, family, text)
		if err != nil {
			return nil, fmt.Errorf("listing the plan as nft would: %w", err)
		}
		want, err := loadNFTListing(family, planned)
		if err != nil {
			return nil, fmt.Errorf("reading the plan: %w", err)
		}
		fam := string(knftablesFamily(family))
		out, err := run(ctx, "nft", "-s", "list", "table", fam, nftTableName)
		var live *knftables.Fake
		switch {
		case err != nil && strings.Contains(string(out)+err.Error(), "No such file or directory"):
			live = knftables.NewFake(knftablesFamily(family), nftTableName) // no table yet
		case err != nil:
			return nil, fmt.Errorf("cannot read the nftables table %s %s: %w", fam, nftTableName, err)
		default:
			if live, err = loadNFTListing(family, string(out)); err != nil {
				return nil, fmt.Errorf("loading the node's table: %w", err)
			}
		}
		return diffNFTablesTables(want, live), nil
	})
}

// loadNFTListing loads nft's listing of the kube-proxy table into a
// knftables fake.
func loadNFTListing(family v1.IPFamily, listing string) (*knftables.Fake, error) {
	f := knftables.NewFake(knftablesFamily(family), nftTableName)
	tx := f.NewTransaction()
	if _, err := parseNFTListing(listing, tx); err != nil {
		return nil, err
	}
	if err := f.Run(context.Background(), tx); err != nil {
		return nil, err
	}
	return f, nil
}

// diffNFTablesTables returns the nft commands that make live's table
// want's: new chains, sets and maps added; a chain whose rules differ
// flushed and filled again; elements added and deleted one by one; a
// chain, set or map whose definition differs deleted and added again;
// what the plan no longer has deleted, last (a chain may still jump to
// it until then).
func diffNFTablesTables(want, live *knftables.Fake) []string {
	tx := want.NewTransaction() // only rendered, never run
	var deletes []knftables.Object
	if want.Table == nil {
		return nil
	}
	liveTable := live.Table
	if liveTable == nil {
		tx.Add(&knftables.Table{Comment: want.Table.Comment})
		liveTable = &knftables.FakeTable{}
	}
	// Sets and maps first: rules name them.
	for _, name := range slices.Sorted(maps.Keys(want.Table.Sets)) {
		ws, ls := want.Table.Sets[name], liveTable.Sets[name]
		wdef, ldef := ws.Set, knftables.Set{}
		if ls != nil {
			ldef = ls.Set
		}
		var lelems []*knftables.Element
		if ls == nil || render(&wdef) != render(&ldef) {
			if ls != nil {
				tx.Delete(&knftables.Set{Name: name})
			}
			tx.Add(&wdef)
		} else {
			lelems = ls.Elements
		}
		if !slices.Contains(wdef.Flags, knftables.DynamicFlag) {
			diffElements(tx, ws.Elements, lelems)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want.Table.Maps)) {
		wm, lm := want.Table.Maps[name], liveTable.Maps[name]
		wdef, ldef := wm.Map, knftables.Map{}
		if lm != nil {
			ldef = lm.Map
		}
		var lelems []*knftables.Element
		if lm == nil || render(&wdef) != render(&ldef) {
			if lm != nil {
				tx.Delete(&knftables.Map{Name: name})
			}
			tx.Add(&wdef)
		} else {
			lelems = lm.Elements
		}
		diffElements(tx, wm.Elements, lelems)
	}
	for _, name := range slices.Sorted(maps.Keys(want.Table.Chains)) {
		wc, lc := want.Table.Chains[name], liveTable.Chains[name]
		wdef := wc.Chain
		switch {
		case lc == nil:
			tx.Add(&wdef)
		case render(&wdef) != render(&lc.Chain):
			tx.Delete(&knftables.Chain{Name: name})
			tx.Add(&wdef)
		case sameRules(wc.Rules, lc.Rules):
			continue
		default:
			tx.Flush(&knftables.Chain{Name: name})
		}
		for _, r := range wc.Rules {
			tx.Add(&knftables.Rule{Chain: name, Rule: r.Rule, Comment: r.Comment})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(liveTable.Chains)) {
		if _, ok := want.Table.Chains[name]; !ok {
			tx.Flush(&knftables.Chain{Name: name})
			deletes = append(deletes, &knftables.Chain{Name: name})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(liveTable.Sets)) {
		if _, ok := want.Table.Sets[name]; !ok {
			deletes = append(deletes, &knftables.Set{Name: name})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(liveTable.Maps)) {
		if _, ok := want.Table.Maps[name]; !ok {
			deletes = append(deletes, &knftables.Map{Name: name})
		}
	}
	for _, o := range deletes {
		tx.Delete(o)
	}
	if tx.NumOperations() == 0 {
		return nil
	}
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(tx.String()), "\n") {
		cmds = append(cmds, "nft "+shellQuote(l))
	}
	return cmds
}

// diffElements adds want's elements that live lacks or holds with
// another value, and deletes live's that want lacks.
func diffElements(tx *knftables.Transaction, want, live []*knftables.Element) {
	liveBy := map[string]*knftables.Element{}
	for _, e := range live {
		liveBy[strings.Join(e.Key, " . ")] = e
	}
	wantKeys := map[string]bool{}
	for _, e := range want {
		k := strings.Join(e.Key, " . ")
		wantKeys[k] = true
		l := liveBy[k]
		if l != nil && render(l) == render(e) {
			continue
		}
		if l != nil {
			tx.Delete(&knftables.Element{Set: l.Set, Map: l.Map, Key: l.Key})
		}
		tx.Add(e)
	}
	for _, e := range live {
		if !wantKeys[strings.Join(e.Key, " . ")] {
			tx.Delete(&knftables.Element{Set: e.Set, Map: e.Map, Key: e.Key})
		}
	}
}

func sameRules(a, b []*knftables.Rule) bool {
	return slices.EqualFunc(a, b, func(x, y *knftables.Rule) bool {
		return render(&knftables.Rule{Chain: x.Chain, Rule: x.Rule, Comment: x.Comment}) ==
			render(&knftables.Rule{Chain: y.Chain, Rule: y.Rule, Comment: y.Comment})
	})
}

// render is an object's "add" line, its identity for comparing.
func render(o knftables.Object) string {
	tx := knftables.NewFake(knftables.IPv4Family, nftTableName).NewTransaction()
	tx.Add(o)
	return tx.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// listPlanInScratchNetns loads a family's plan with nft -f into a network
// namespace made for it (the node's own tables are never touched) and
// returns nft's listing of the table it makes. The namespace lives on a
// thread of its own that ends with it.
func listPlanInScratchNetns(ctx context.Context, family v1.IPFamily, plan string) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, in the scratch namespace, ends with
		// this goroutine instead of going back to the scheduler.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("a scratch network namespace: %w", err)}
			return
		}
		load := exec.CommandContext(ctx, "nft", "-f", "-")
		load.Stdin = strings.NewReader(plan)
		var stderr bytes.Buffer
		load.Stderr = &stderr
		if err := load.Run(); err != nil {
			done <- result{err: fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(stderr.String()))}
			return
		}
		list := exec.CommandContext(ctx, "nft", "-s", "list", "table", string(knftablesFamily(family)), nftTableName)
		stderr.Reset()
		list.Stderr = &stderr
		out, err := list.Output()
		if err != nil {
			err = fmt.Errorf("nft list: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		done <- result{out: string(out), err: err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		return "", errors.Join(ctx.Err(), errors.New("listing the plan in a scratch namespace"))
	}
}
