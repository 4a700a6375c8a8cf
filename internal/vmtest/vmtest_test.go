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
