package xtables

import (
	"slices"
	"testing"
)

// tablesOf names each table of a restore input once, in order, from its
// header lines only.
func TestTablesOf(t *testing.T) {
	in := "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n*filter \nCOMMIT\n* raw\n*nat\nCOMMIT"
	if got, want := tablesOf([]byte(in)), []string{"nat", "filter"}; !slices.Equal(got, want) {
		t.Errorf("tablesOf = %q, want %q", got, want)
	}
}
