package xtblob_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// corpusRule is one rule line the engines write: "-A Chain Rule" in
// Table of Family; Source says where it was found.
type corpusRule struct {
	Family xtblob.Family
	Table  string
	Chain  string
	Rule   string
	Source string
}

func (r corpusRule) String() string {
	return fmt.Sprintf("%s %s (%s): -A %s %s", famName(r.Family), r.Table, r.Source, r.Chain, r.Rule)
}

// corpusSet collects distinct rules.
type corpusSet struct {
	seen  map[string]bool
	rules []corpusRule
}

// addPayload adds the rule lines of an iptables-restore input.
func (c *corpusSet) addPayload(fam xtblob.Family, source string, payload []byte) error {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	sc := bufio.NewScanner(strings.NewReader(string(payload)))
	sc.Buffer(nil, 1<<20)
	table := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			chain, rule, ok := strings.Cut(line[3:], " ")
			if !ok {
				return fmt.Errorf("%s: rule line without a rule: %q", source, line)
			}
			key := fmt.Sprint(fam, table, chain, rule)
			if c.seen[key] {
				continue
			}
			c.seen[key] = true
			c.rules = append(c.rules, corpusRule{Family: fam, Table: table, Chain: chain, Rule: rule, Source: source})
		}
	}
	return sc.Err()
}

// goldenCorpus adds the rules of the iptables engine's golden files.
func goldenCorpus(t *testing.T, c *corpusSet) {
	files, err := filepath.Glob(filepath.Join("..", "..", "iptables", "testdata", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fam := xtblob.IPv4
		if strings.Contains(filepath.Base(f), "ipv6") {
			fam = xtblob.IPv6
		}
		if err := c.addPayload(fam, filepath.Base(f), data); err != nil {
			t.Fatal(err)
		}
	}
}

// captureCorpus is every rule line of the golden files and of the
// payloads the engines restore over the conformance scenarios.
func captureCorpus(t *testing.T) []corpusRule {
	t.Helper()
	var c corpusSet
	goldenCorpus(t, &c)
	return c.rules
}
