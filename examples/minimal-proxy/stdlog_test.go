package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestStdLogBridge: the standard logger's lines (vishvananda/netlink's
// "unknown ipset data attribute" among them) reach the binary's log at
// --v=4 and above, and nowhere below it or before a logger is set.
func TestStdLogBridge(t *testing.T) {
	line := "unknown ipset data attribute from kernel: {Len:8 Type:33} 33\n"
	var b stdLogBridge
	if n, err := b.Write([]byte(line)); n != len(line) || err != nil {
		t.Fatalf("Write before set = %d, %v; want %d, nil", n, err, len(line))
	}
	for _, tc := range []struct {
		v    int
		want bool
	}{{0, false}, {2, false}, {4, true}, {6, true}} {
		var out bytes.Buffer
		b.set(newLogger(&out, &out, LoggingConfig{Verbosity: tc.v}))
		b.Write([]byte(line))
		if got := strings.Contains(out.String(), "unknown ipset data attribute"); got != tc.want {
			t.Errorf("--v=%d: line logged = %v, want %v (output %q)", tc.v, got, tc.want, out.String())
		}
		if tc.want && !strings.Contains(out.String(), "stdlog") {
			t.Errorf("--v=%d: line not named stdlog: %q", tc.v, out.String())
		}
	}
}
