package xtables_test

import (
	"testing"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

func TestSection(t *testing.T) {
	all := []byte("# x\n*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n# y\n*nat\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n*filter\nCOMMIT\n")
	for _, c := range []struct {
		table xtables.Table
		want  string
	}{
		{xtables.TableMangle, "*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"},
		{xtables.TableNAT, "*nat\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n"},
		{xtables.TableFilter, "*filter\nCOMMIT\n"},
		{"raw", ""},
	} {
		if got := string(xtables.Section(all, c.table)); got != c.want {
			t.Errorf("Section(%s) = %q, want %q", c.table, got, c.want)
		}
	}
}
