package vmtest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReport(t *testing.T) {
	in := "=== RUN   TestA\n=== PAUSE TestA\n=== CONT  TestA\n    a_test.go:1: hello\n--- PASS: TestA (0.00s)\nPASS"
	want := "    a_test.go:1: hello\n--- PASS: TestA (0.00s)\nPASS"
	if got := Report(in); got != want {
		t.Errorf("Report = %q, want %q", got, want)
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "vmtest", "vmtest.sh")); err != nil {
		t.Errorf("moduleRoot() = %s, which has no hack/vmtest/vmtest.sh: %v", root, err)
	}
}

func TestTestOutcome(t *testing.T) {
	out := "=== RUN   TestA\n" +
		"--- PASS: TestAB (1.00s)\n" +
		"    --- PASS: TestA/IPv4 (1.00s)\n" +
		"    --- SKIP: TestC/IPv6 (0.00s)\n" +
		"--- PASS: TestA (2.00s)\n" +
		"--- PASS: TestC (2.00s)\n" +
		"--- FAIL: TestD (2.00s)\n"
	for _, tc := range []struct {
		test string
		ok   bool
	}{
		{"TestA", true},
		{"TestAB", true},
		{"TestC", false}, // a subtest skipped
		{"TestD", false}, // failed
		{"TestE", false}, // never ran
	} {
		why := testOutcome(out, tc.test)
		if (why == "") != tc.ok {
			t.Errorf("testOutcome(%s) = %q, want ok=%v", tc.test, why, tc.ok)
		}
	}
}
