package memfd

import (
	"bytes"
	"os/exec"
	"testing"
)

// A child reads the whole file from its start as its standard input.
func TestFileIsAChildsInput(t *testing.T) {
	data := bytes.Repeat([]byte("-A KUBE-SERVICES -j ACCEPT\n"), 100_000) // 2.7 MB
	f, err := File("memfd-test", data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("cat")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatalf("the child read %d bytes, want the %d written", len(out), len(data))
	}
}
