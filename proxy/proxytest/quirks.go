package proxytest

import "fmt"

// ApplyQuirks returns scenarios with quirks applied as RunScenarios applies
// them, for harnesses that drive the table their own way (through a real
// API server, say): each matching check's wanted result is rewritten by the
// quirk's Adjust, and a check matched by a quirk with a nil Adjust is
// dropped. scenarios is not modified. Quirks are validated as RunScenarios
// validates them: one without a Reason or a Scenario, or one naming a
// scenario in the list but matching none of its checks, is an error.
func ApplyQuirks(scenarios []Scenario, quirks []Quirk) ([]Scenario, error) {
	if err := validateQuirks(scenarios, quirks); err != nil {
		return nil, fmt.Errorf("proxytest: %w", err)
	}
	out := make([]Scenario, len(scenarios))
	for i, sc := range scenarios {
		steps := make([]Step, len(sc.Steps))
		for j, st := range sc.Steps {
			checks := make([]Check, 0, len(st.Checks))
			for _, c := range st.Checks {
				want, skip := quirkedWant(quirks, sc.Name, st.Name, c)
				if skip != "" {
					continue
				}
				c.Want = want
				checks = append(checks, c)
			}
			st.Checks = checks
			steps[j] = st
		}
		sc.Steps = steps
		out[i] = sc
	}
	return out, nil
}

// quirkedWant is c's wanted result after the quirks that match it, or the
// Reason of a quirk that skips it.
func quirkedWant(quirks []Quirk, scenario, step string, c Check) (want Result, skip string) {
	want = c.Want
	for _, q := range quirks {
		if !q.matches(scenario, step, c.Name) {
			continue
		}
		if q.Adjust == nil {
			skip = q.Reason
		} else {
			want = q.Adjust(want)
		}
	}
	return want, skip
}
