package proxytest

import (
	"fmt"
	"slices"
)

// ApplyQuirks returns scenarios with quirks applied: each matching check's
// wanted result is rewritten by the quirk's Adjust, and a check matched by
// a quirk with a nil Adjust is dropped (a skip wins over any Adjust).
// scenarios is not modified. The conformance runner (package
// proxytest/conformance) applies a Harness's quirks through this function,
// and harnesses that drive the table their own way (through a real API
// server, say) call it directly. Quirks are validated first: one without a
// Reason or a Scenario, or one naming a scenario in the list but matching
// none of its checks, is an error, so stale quirks do not pile up.
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
		if !q.Matches(scenario, step, c.Name) {
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

// validateQuirks checks that every quirk has a Reason and a Scenario, and
// that a quirk naming a scenario of the list matches one of its checks.
func validateQuirks(scenarios []Scenario, quirks []Quirk) error {
	for _, q := range quirks {
		if q.Reason == "" {
			return fmt.Errorf("quirk for scenario %q has no Reason", q.Scenario)
		}
		if q.Scenario == "" {
			return fmt.Errorf("quirk %q names no scenario", q.Reason)
		}
		found := false
		for _, sc := range scenarios {
			for _, st := range sc.Steps {
				for _, c := range st.Checks {
					found = found || q.Matches(sc.Name, st.Name, c.Name)
				}
			}
		}
		if !found && slices.ContainsFunc(scenarios, func(sc Scenario) bool { return sc.Name == q.Scenario }) {
			return fmt.Errorf("quirk %q: scenario %q has no step %q with check %q", q.Reason, q.Scenario, q.Step, q.Check)
		}
	}
	return nil
}
