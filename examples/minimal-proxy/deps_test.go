package main

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryDoesNotLinkTesting keeps package testing (and its flags and
// runtime hooks) out of the reference binary. The dry run links the shipped
// fakes, which speak proxy/proxytest's vocabulary; only the conformance
// runner (proxy/proxytest/conformance) may import testing. go list -deps of
// a main package leaves out its _test files, so this sees what is linked.
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH (%v): cannot list the binary's dependencies", err)
	}
	for _, goos := range []string{"", "windows"} {
		name := goos
		if name == "" {
			name = "host"
		}
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(gotool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".")
			cmd.Env = os.Environ()
			if goos != "" {
				cmd.Env = append(cmd.Env, "GOOS="+goos)
			}
			out, err := cmd.Output()
			if err != nil {
				var stderr string
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("go list -deps .: %v\n%s", err, stderr)
			}
			var linked bool
			var importers []string
			for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
				fields := strings.Fields(line)
				if len(fields) == 0 {
					continue
				}
				if fields[0] == "testing" {
					linked = true
				}
				if slices.Contains(fields[1:], "testing") {
					importers = append(importers, fields[0])
				}
			}
			if linked || len(importers) > 0 {
				t.Errorf("the binary links package testing, imported by %s; keep testing-only code (like the conformance runner) in packages the binary does not import", strings.Join(importers, ", "))
			}
		})
	}
}
