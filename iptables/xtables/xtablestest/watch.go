package xtablestest

import (
	"bytes"
	"hash/fnv"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// SetTableWatch chooses what the Fake answers to TableGeneration,
// TableDigest and TableChainNames, modelling a backend: xtables.BackendNFT, the nftables generation id
// (one per command that changed a table, and one per restored table
// section holding a line, as iptables-nft-restore commits); or
// xtables.BackendLegacy, a digest of each table (its rules as Dump prints
// them) with the legacy blob's entry count. "" (the default) answers
// neither, so an engine lists the tables on every full sync.
func (f *Fake) SetTableWatch(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watch = backend
}

// TableGeneration implements xtables.Runner (see SetTableWatch).
func (f *Fake) TableGeneration() (uint32, bool, error) {
	if err := f.Hit("TableGeneration"); err != nil {
		return 0, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.watch == xtables.BackendNFT, nil
}

// TableChainNames implements xtables.Runner: with the legacy watch (see
// SetTableWatch), the names of table's chains, built-in and user-defined,
// in no particular order; ok is false otherwise or with no such table.
func (f *Fake) TableChainNames(table xtables.Table) ([]string, bool, error) {
	if err := f.Hit("TableChainNames"); err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch != xtables.BackendLegacy {
		return nil, false, nil
	}
	t := f.tables[table]
	if t == nil {
		return nil, false, nil
	}
	names := make([]string, 0, len(t.chains))
	for n := range t.chains {
		names = append(names, string(n))
	}
	return names, true, nil
}

// TableDigest implements xtables.Runner (see SetTableWatch).
func (f *Fake) TableDigest(table xtables.Table) (xtables.TableDigest, bool, error) {
	if err := f.Hit("TableDigest"); err != nil {
		return xtables.TableDigest{}, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch != xtables.BackendLegacy {
		return xtables.TableDigest{}, false, nil
	}
	t, err := f.table(table, false)
	if err != nil {
		return xtables.TableDigest{}, false, err
	}
	var buf bytes.Buffer
	t.dump(&buf)
	h := fnv.New64a()
	h.Write(buf.Bytes())
	entries := 1
	for _, c := range t.chains {
		entries += len(c.rules) + 2
		if c.builtin {
			entries--
		}
	}
	return xtables.TableDigest{Hash: h.Sum64(), Entries: uint32(entries)}, true, nil
}
