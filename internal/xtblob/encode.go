package xtblob

import (
	"errors"
	"fmt"
)

// Family is the IP family of a table: IPv4 (iptables) or IPv6 (ip6tables).
type Family uint8

// The families.
const (
	IPv4 Family = iota
	IPv6
)

// ErrUnsupported is wrapped by the errors for input this package does not
// encode (a match, target or option outside the engines' vocabulary). The
// caller should run the iptables tool instead; nothing has been written.
var ErrUnsupported = errors.New("xtblob: not supported in process")

// RuleRef says where a rule encoded by Encoder.AppendRule jumps.
type RuleRef struct {
	// Jump is the chain named by the rule's -j (or -g, see Goto) when it
	// is a user-defined chain, aliasing the rule text; nil for any other
	// target. The table writer patches its verdict (at VerdictAt) with
	// the chain's offset.
	Jump []byte
	// Goto is set for -g.
	Goto bool
	// VerdictAt is the offset, in the buffer AppendRule returned, of the
	// standard target's 32-bit verdict; -1 when the target is not the
	// standard one (DNAT, MARK, ...).
	VerdictAt int
}

// Encoder encodes rules of one family. It keeps scratch space between
// calls, so it is not safe for concurrent use; use one per goroutine.
type Encoder struct {
	fam Family
}

// NewEncoder returns an Encoder for fam.
func NewEncoder(fam Family) *Encoder { return &Encoder{fam: fam} }

// AppendRule appends to dst the entry iptables-legacy builds for rule, the
// arguments of an iptables-restore rule line after "-A CHAIN " (for
// example `-d 10.96.0.10/32 -p tcp -m comment --comment "ns/svc:http" -m
// tcp --dport 80 -j KUBE-SVC-…`), with next_offset and target_offset set
// and counters and comefrom zero, and reports its jump. An argument
// outside the vocabulary yields an error wrapping ErrUnsupported, a
// malformed one (a bad address or port) another error; dst is then
// returned unchanged.
func (e *Encoder) AppendRule(dst []byte, rule []byte) ([]byte, RuleRef, error) {
	return dst, RuleRef{VerdictAt: -1}, fmt.Errorf("%w: the encoder is not written yet", ErrUnsupported)
}
