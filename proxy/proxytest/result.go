package proxytest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// String renders the packet as "origin src[:srcport] -> dst:port/proto".
func (p Packet) String() string {
	src := p.Src.String()
	if p.SrcPort != 0 {
		src = netip.AddrPortFrom(p.Src, uint16(p.SrcPort)).String()
	}
	return fmt.Sprintf("%s %s -> %s/%s", p.Origin, src, netip.AddrPortFrom(p.Dst, uint16(p.Port)), p.Protocol)
}

// String renders the result, e.g. "forwarded to [10.244.1.2:8080] masquerade sticky".
func (r Result) String() string {
	r = r.Normalize()
	if r.Verdict != Forwarded {
		return r.Verdict.String()
	}
	var b strings.Builder
	b.WriteString("forwarded to [")
	for i, be := range r.Backends {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(be.String())
	}
	b.WriteString("]")
	if r.Masquerade {
		b.WriteString(" masquerade")
	} else {
		b.WriteString(" no-masquerade")
	}
	if r.Sticky {
		b.WriteString(" sticky")
	}
	return b.String()
}

// Normalize returns r with Backends sorted and deduplicated, and with the
// fields that only mean something for Forwarded (Backends, Masquerade,
// Sticky) cleared for every other verdict.
func (r Result) Normalize() Result {
	if r.Verdict != Forwarded {
		return Result{Verdict: r.Verdict}
	}
	bs := slices.Clone(r.Backends)
	slices.SortFunc(bs, func(a, b netip.AddrPort) int { return a.Compare(b) })
	r.Backends = slices.Compact(bs)
	return r
}

// Equal reports whether two results mean the same (after Normalize).
func (r Result) Equal(o Result) bool {
	r, o = r.Normalize(), o.Normalize()
	return r.Verdict == o.Verdict && slices.Equal(r.Backends, o.Backends) &&
		r.Masquerade == o.Masquerade && r.Sticky == o.Sticky
}

// Sampler is implemented by tracers that observe real traffic instead of
// computing the answer from rules (the real-kernel prober). Such a tracer
// can only report the backends it has seen, so TraceSample gets the wanted
// result as a hint of how long to keep sampling (stop once every wanted
// backend answered, bounded either way). The hint never shapes the answer.
//
// The conformance runner (package proxytest/conformance) calls
// TraceSample when a tracer has it, and then compares sticky results
// leniently: a sampling tracer sees a single backend for a sticky service,
// which must be one of the wanted ones; and stickiness cannot be observed
// when fewer than two backends are wanted.
type Sampler interface {
	TraceSample(p Packet, want Result) (Result, error)
}

// Match compares a tracer's result got against want and returns "" when
// they agree or a one-line reason otherwise. sampled says got came from a
// Sampler (see there for the lenient sticky rules).
func Match(want, got Result, sampled bool) string {
	want, got = want.Normalize(), got.Normalize()
	if want.Verdict != got.Verdict {
		return fmt.Sprintf("verdict %s, want %s", got.Verdict, want.Verdict)
	}
	if want.Verdict != Forwarded {
		return ""
	}
	var why []string
	if sampled && want.Sticky && len(want.Backends) >= 2 {
		if !got.Sticky {
			why = append(why, "not sticky: one client reached several backends")
		}
		for _, b := range got.Backends {
			if !slices.Contains(want.Backends, b) {
				why = append(why, fmt.Sprintf("backend %s not wanted", b))
			}
		}
	} else {
		if !slices.Equal(want.Backends, got.Backends) {
			why = append(why, "backends differ")
		}
		if (!sampled || len(want.Backends) >= 2) && want.Sticky != got.Sticky {
			why = append(why, fmt.Sprintf("sticky %v, want %v", got.Sticky, want.Sticky))
		}
	}
	if want.Masquerade != got.Masquerade {
		why = append(why, fmt.Sprintf("masquerade %v, want %v", got.Masquerade, want.Masquerade))
	}
	return strings.Join(why, "; ")
}
