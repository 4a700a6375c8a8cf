package nfgen

import "testing"

func TestCustody(t *testing.T) {
	var c Custody
	if c.Unchanged(0) {
		t.Fatal("the zero Custody knows nothing")
	}
	if c.Committed(0, 1) {
		t.Fatal("a commit without a verified start holds no custody")
	}
	c.Verified(7)
	if !c.Unchanged(7) || c.Unchanged(8) {
		t.Fatal("Unchanged after Verified(7)")
	}
	if !c.Committed(7, 8) || !c.Unchanged(8) {
		t.Fatal("our own commit keeps custody")
	}
	if c.Committed(8, 10) {
		t.Fatal("two commits (one foreign) keep custody")
	}
	if c.Unchanged(10) {
		t.Fatal("custody lost, yet unchanged")
	}
	c.Verified(10)
	if c.Committed(11, 12) {
		t.Fatal("a commit after a foreign one keeps custody")
	}
	c.Verified(^uint32(0))
	if !c.Committed(^uint32(0), 1) {
		t.Fatal("the generation wraps")
	}
}
