//go:build linux

package xtablestest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// skipUnlessRealIptables skips unless the test can run the real iptables
// tools in a scratch network namespace of its own.
func skipUnlessRealIptables(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the real iptables-restore in a scratch network namespace (unshare -n)")
	}
	for _, tool := range append([]string{"unshare"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// runReal applies each input with "<prefix>-restore --noflush" inside a
// fresh network namespace (created by unshare for this call only and gone
// when it exits: the host's rules are never touched), then returns
// whether each succeeded and the final "<prefix>-save" output without
// its comment lines.
func runReal(t *testing.T, prefix string, inputs []string) (ok []bool, save string) {
	t.Helper()
	dir := t.TempDir()
	var script strings.Builder
	for i, in := range inputs {
		name := filepath.Join(dir, fmt.Sprintf("in%d", i))
		if err := os.WriteFile(name, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "%s-restore --noflush < %s 2>/dev/null; echo \"@rc $?\"\n", prefix, name)
	}
	fmt.Fprintf(&script, "%s-save\n", prefix)
	cmd := exec.Command("unshare", "--net", "sh", "-c", script.String())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("unshare: %v: %s", err, stderr.String())
	}
	var saved strings.Builder
	for _, line := range strings.SplitAfter(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "@rc "):
			ok = append(ok, strings.TrimSpace(line) == "@rc 0")
		case strings.HasPrefix(line, "#"):
		default:
			saved.WriteString(line)
		}
	}
	return ok, saved.String()
}

// tableSection returns the "*table ... COMMIT\n" part of a save output.
func tableSection(save, table string) string {
	i := strings.Index(save, "*"+table+"\n")
	if i < 0 {
		return ""
	}
	j := strings.Index(save[i:], "COMMIT\n")
	return save[i : i+j+len("COMMIT\n")]
}

// TestDifferentialAgainstRealIptables feeds the same inputs to the real
// iptables-restore (nft and legacy backends, each in its own scratch
// network namespace) and to the Fake: each input must succeed or fail
// alike, and every table the Fake holds must save identically.
func TestDifferentialAgainstRealIptables(t *testing.T) {
	for _, backend := range []string{"nft", "legacy"} {
		for _, tc := range differentialCases {
			t.Run(backend+"/"+tc.name, func(t *testing.T) {
				prefix := "iptables-" + backend
				if tc.family == v1.IPv6Protocol {
					prefix = "ip6tables-" + backend
				}
				if tc.legacyOnly && backend == "nft" {
					t.Skip("iptables-nft-restore 1.8.9 crashes (SIGSEGV) on this input")
				}
				skipUnlessRealIptables(t, prefix+"-restore", prefix+"-save")
				realOK, realSave := runReal(t, prefix, tc.inputs)
				if len(realOK) != len(tc.inputs) {
					t.Fatalf("real run reported %d results for %d inputs", len(realOK), len(tc.inputs))
				}
				f := NewFake(tc.family)
				for i, in := range tc.inputs {
					err := f.Restore(ctx, xtables.RestoreInput{Text: []byte(in)})
					if (err == nil) != realOK[i] {
						t.Errorf("input %d: real ok=%v, fake err=%v\n%s", i, realOK[i], err, in)
					}
				}
				for _, table := range tableOrder {
					if f.tables[table] == nil {
						continue
					}
					var buf bytes.Buffer
					_ = f.SaveInto(ctx, table, &buf)
					if real := tableSection(realSave, string(table)); real != buf.String() {
						t.Errorf("table %s differs.\nfake:\n%s\nreal:\n%s", table, buf.String(), real)
					}
				}
			})
		}
	}
}
