package xtblob_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// FuzzAppendRule: any input either encodes into one well-formed entry
// (next_offset its length, target_offset inside it, matches that tile the
// space before the target, VerdictAt on the standard target) or fails
// with dst unchanged; it never panics. Seeded with the vocabulary file.
func FuzzAppendRule(f *testing.F) {
	var c corpusSet
	if err := vocabularyCorpus(&c); err != nil {
		f.Fatal(err)
	}
	for _, r := range c.rules {
		f.Add(r.Family == xtblob.IPv6, r.Rule)
	}
	f.Add(false, `-m comment --comment "x" -m tcp -p tcp --dport 80 -j KUBE-SVC-X`)
	f.Fuzz(func(t *testing.T, v6 bool, rule string) {
		fam, hdr, tOffAt, nOffAt := xtblob.IPv4, 112, 88, 90
		if v6 {
			fam, hdr, tOffAt, nOffAt = xtblob.IPv6, 168, 140, 142
		}
		enc := xtblob.NewEncoder(fam)
		enc.SetIndex = fakeSetIndex
		dst := []byte("prefix")
		out, ref, err := enc.AppendRule(dst, []byte(rule))
		if err != nil {
			if string(out) != "prefix" || ref.Jump != nil || ref.VerdictAt != -1 {
				t.Fatalf("%q: error %v but dst %q, ref %+v", rule, err, out, ref)
			}
			return
		}
		if !bytes.HasPrefix(out, []byte("prefix")) {
			t.Fatalf("%q: dst's bytes changed", rule)
		}
		e := out[len("prefix"):]
		ne := binary.NativeEndian
		next, toff := int(ne.Uint16(e[nOffAt:])), int(ne.Uint16(e[tOffAt:]))
		if next != len(e) || toff < hdr || toff+32 > next {
			t.Fatalf("%q: %d bytes, next_offset %d, target_offset %d", rule, len(e), next, toff)
		}
		if ts := int(ne.Uint16(e[toff:])); toff+ts != next || ts%8 != 0 {
			t.Fatalf("%q: target of %d bytes at %d in %d", rule, ts, toff, next)
		}
		for off := hdr; off < toff; {
			ms := int(ne.Uint16(e[off:]))
			if ms < 32 || ms%8 != 0 || off+ms > toff {
				t.Fatalf("%q: match of %d bytes at %d (target at %d)", rule, ms, off, toff)
			}
			off += ms
		}
		standard := e[toff+2] == 0
		if standard != (ref.VerdictAt >= 0) || standard && ref.VerdictAt != len(out)-8 {
			t.Fatalf("%q: standard target %v, VerdictAt %d of %d", rule, standard, ref.VerdictAt, len(out))
		}
		if (ref.Jump != nil || ref.Goto || ref.Fallthrough) && !standard {
			t.Fatalf("%q: ref %+v on a non-standard target", rule, ref)
		}
	})
}
