package proxytest

import (
	"errors"
	"testing"
)

func TestFaults(t *testing.T) {
	var f Faults
	boom := errors.New("boom")
	if err := f.Hit("Restore"); err != nil {
		t.Fatalf("no fault injected, got %v", err)
	}
	f.FailAfter("Restore", 1, 2, boom)
	got := []error{f.Hit("Restore"), f.Hit("Restore"), f.Hit("Restore"), f.Hit("Restore")}
	want := []error{nil, boom, boom, nil}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: got %v, want %v", i, got[i], want[i])
		}
	}
	f.FailOn("*", -1, boom)
	if f.Hit("Other") != boom || f.Hit("Other") != boom {
		t.Error(`"*" with count -1 should fail every call`)
	}
	f.Heal()
	if f.Hit("Other") != nil {
		t.Error("Heal left a fault")
	}
	if n := f.CallsOf("Restore", "Other"); n != 8 {
		t.Errorf("CallsOf = %d, want 8", n)
	}
	f.ResetCalls()
	if len(f.Calls()) != 0 {
		t.Error("ResetCalls left counts")
	}
}
