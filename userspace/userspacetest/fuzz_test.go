package userspacetest

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseRule: the iptables-save parser never panics, and a quoted
// argument comes back unquoted.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		`-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http" -m tcp --dport 80 -j REDIRECT --to-ports 40000`,
		`-A KUBE-PORTALS-HOST -d fd00::1/128 -p udp -m udp --dport 53 -j DNAT --to-destination [fd00::2]:40001`,
		`-A X -s 10.0.0.0/8 --dport x`, `-A "unterminated`, `-A X -d`, `-A X --to-destination 1.2.3.4`,
	} {
		f.Add(s, "a b \"c\"")
	}
	f.Fuzz(func(t *testing.T, line, comment string) {
		parseRule(line) // must not panic
		toks, err := tokenize("-A X -m comment --comment " + strconv.Quote(comment) + " -j ACCEPT")
		if err != nil {
			t.Fatalf("tokenize of a quoted comment: %v", err)
		}
		if len(toks) != 8 || toks[5] != comment {
			t.Fatalf("comment %q came back as %q", comment, strings.Join(toks, "|"))
		}
	})
}
