package proxytest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Shuffle returns the scenarios with the steps of each multi-step scenario
// replayed in random orders: rounds random permutations, one after the
// other (rounds < 1 counts as 1). Single-step and Ordered scenarios are
// left out.
//
// Every step is a complete desired state whose checks depend on nothing
// else, so an engine must pass its checks whatever state it comes from:
// running the shuffled table shows that every transition converges, not
// only the ones the table lists. The same seed gives the same order; it is
// recorded in each scenario's Doc. Repeated steps are named "name#2",
// "name#3" and so on; quirks match them by their original name.
func Shuffle(scenarios []Scenario, seed uint64, rounds int) []Scenario {
	if rounds < 1 {
		rounds = 1
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []Scenario
	for _, sc := range scenarios {
		if len(sc.Steps) < 2 || sc.Ordered {
			continue
		}
		sh := sc
		sh.Doc = fmt.Sprintf("%s (steps shuffled, seed %d, %d rounds)", sc.Doc, seed, rounds)
		sh.Steps = nil
		seen := map[string]int{}
		for range rounds {
			for _, i := range r.Perm(len(sc.Steps)) {
				st := sc.Steps[i]
				seen[st.Name]++
				if n := seen[st.Name]; n > 1 {
					st.Name = fmt.Sprintf("%s#%d", st.Name, n)
				}
				sh.Steps = append(sh.Steps, st)
			}
		}
		out = append(out, sh)
	}
	return out
}

// baseStepName strips the "#n" suffix Shuffle adds to repeated steps.
func baseStepName(name string) string {
	if i := strings.LastIndexByte(name, '#'); i > 0 {
		return name[:i]
	}
	return name
}
