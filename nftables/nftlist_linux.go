//go:build linux

package nftables

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"sigs.k8s.io/knftables"
)

// chainRulesLister lists the rules of several chains of the table with
// one nft process (see nftListChains); the self-check's read-back uses it
// when set (NewInterfaces sets it). A chain missing from the result was
// not listed: missing from the table, or nft could not list it.
type chainRulesLister func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error)

// nftChainRulesLister lists chains of TableName in family with nft.
func nftChainRulesLister(family knftables.Family) chainRulesLister {
	return func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error) {
		return nftListChains(ctx, "nft", family, TableName, chains)
	}
}

// nftListChains lists the rules of chains with one nft process: nft
// --json -i reads one "list chain" command per line from its standard
// input and prints one JSON document per command that succeeds (an error,
// a chain not found, goes to its standard error, and the commands after
// it still run). One process instead of one `nft --json list chain` per
// chain: each process starts nft and fills its cache again (the
// self-check's four listings were a third of a cold start's CPU at 1,000
// services, BENCHMARKS.md). (Several "list chain" commands in one nft -f
// do not work: nft 1.0.6 fills its cache for one chain's name only.)
//
// Rules carry their chain, handle and comment, as knftables' ListRules
// returns them. A chain absent from the result had no document: the
// caller tells "missing" from "not listed" by listing it alone.
func nftListChains(ctx context.Context, nft string, family knftables.Family, table string, chains []string) (map[string][]*knftables.Rule, error) {
	var in strings.Builder
	for _, c := range chains {
		if strings.ContainsAny(c, "\n\"") {
			return nil, fmt.Errorf("chain name %q cannot be listed by nft -i", c)
		}
		fmt.Fprintf(&in, "list chain %s %s %s\n", family, table, c)
	}
	cmd := exec.CommandContext(ctx, nft, "--json", "-i")
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nft --json -i: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseChainListings(out, chains)
}

// parseChainListings reads nft's JSON documents ({"nftables": [...]},
// one per listed chain) and returns the rules of each chain of want that
// a document listed (a chain with no rules maps to an empty slice).
func parseChainListings(out []byte, want []string) (map[string][]*knftables.Rule, error) {
	wanted := make(map[string]bool, len(want))
	for _, c := range want {
		wanted[c] = true
	}
	got := make(map[string][]*knftables.Rule, len(want))
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var doc struct {
			NFTables []struct {
				Chain *struct {
					Name string `json:"name"`
				} `json:"chain"`
				Rule *struct {
					Chain   string  `json:"chain"`
					Handle  *int    `json:"handle"`
					Comment *string `json:"comment"`
				} `json:"rule"`
			} `json:"nftables"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return nil, fmt.Errorf("unable to parse nft's JSON output: %w", err)
		}
		for _, o := range doc.NFTables {
			switch {
			case o.Chain != nil && wanted[o.Chain.Name]:
				if _, ok := got[o.Chain.Name]; !ok {
					got[o.Chain.Name] = []*knftables.Rule{}
				}
			case o.Rule != nil && wanted[o.Rule.Chain]:
				got[o.Rule.Chain] = append(got[o.Rule.Chain], &knftables.Rule{
					Chain: o.Rule.Chain, Handle: o.Rule.Handle, Comment: o.Rule.Comment,
				})
			}
		}
	}
}
