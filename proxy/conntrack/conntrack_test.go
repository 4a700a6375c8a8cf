package conntrack

import (
	"errors"
	"testing"
)

func TestEmptyFilterRejected(t *testing.T) {
	if _, err := New().DeleteUDP(false, []Filter{{}}); !errors.Is(err, ErrEmptyFilter) && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("DeleteUDP(empty filter) = %v, want ErrEmptyFilter", err)
	}
	if n, err := New().DeleteUDP(false, nil); n != 0 || err != nil {
		t.Fatalf("DeleteUDP(nil) = %d, %v", n, err)
	}
}
