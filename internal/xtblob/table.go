package xtblob

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// The x_tables structures this file lays out (linux/netfilter/x_tables.h,
// linux/netfilter_ipv4/ip_tables.h, linux/netfilter_ipv6/ip6_tables.h).
// Every entry is an ipt_entry (ip6t_entry) head, its matches, and its
// target; the target starts with struct xt_entry_target: target_size
// (u16), name[29], revision (u8), then the target's data.
const (
	targetHeader   = 32 // sizeof(struct xt_entry_target)
	targetNameAt   = 2
	targetNameLen  = 29 // XT_EXTENSION_MAXNAMELEN
	targetRevAt    = 31
	standardSize   = 40 // XT_ALIGN(sizeof(struct xt_standard_target)): header + int verdict
	errorSize      = 64 // XT_ALIGN(sizeof(struct xt_error_target)): header + errorname[30]
	errorNameLen   = 30 // XT_FUNCTION_MAXNAMELEN
	chainNameLimit = 29 // iptables refuses chain names of 29 characters or more
	numHooks       = 5
	verdictAccept  = -2 // -NF_ACCEPT - 1
	verdictDrop    = -1 // -NF_DROP - 1
	verdictQueue   = -4 // -NF_QUEUE - 1
	verdictReturn  = -5 // XT_RETURN: -NF_REPEAT - 1
	errorTargetStr = "ERROR"
)

// entryLayout is where ipt_entry and ip6t_entry keep their fields.
type entryLayout struct {
	entrySize      int // sizeof(struct ipt_entry): where the matches start
	targetOffsetAt int // u16 target_offset
	nextOffsetAt   int // u16 next_offset
	comefromAt     int // u32 comefrom, the kernel's own bookkeeping
	countersAt     int // struct xt_counters {u64 pcnt, bcnt}
}

var entryLayouts = [2]entryLayout{
	IPv4: {entrySize: 112, targetOffsetAt: 88, nextOffsetAt: 90, comefromAt: 92, countersAt: 96},
	IPv6: {entrySize: 168, targetOffsetAt: 140, nextOffsetAt: 142, comefromAt: 144, countersAt: 152},
}

// headSize is a user chain's head entry (an ERROR target naming the
// chain), also the size of the table's final ERROR entry; footSize is a
// chain's last entry (its policy, or RETURN).
func (l *entryLayout) headSize() int { return l.entrySize + errorSize }
func (l *entryLayout) footSize() int { return l.entrySize + standardSize }

// hookNames are the built-in chains by hook number (NF_INET_PRE_ROUTING ...).
var hookNames = [numHooks]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// The kinds of rule, as libiptc tells them apart: what a rule's standard
// target means decides how its verdict is rewritten when the table moves.
const (
	kindModule      = iota // a target extension (DNAT, MARK, ...)
	kindStandard           // ACCEPT, DROP, QUEUE, RETURN: a negative verdict
	kindFallthrough        // no target: the verdict is the next entry's offset
	kindJump               // to a user chain: the verdict is that chain's first rule
)

// Counter handling of an entry when the table is written, as libiptc's
// counter_map: rules read from the kernel keep theirs (normal); a built-in
// chain's policy keeps only what it counted since it was read (zeroed,
// libiptc's behaviour for every policy it does not set); set gives the
// value in the chain (zero: the tool sets policies from restore input
// without -c to zero).
const (
	ctrNone = iota
	ctrNormal
	ctrZeroed
	ctrSet
)

// info is the table's ipt_getinfo.
type info struct {
	validHooks uint32
	hookEntry  [numHooks]uint32
	underflow  [numHooks]uint32
	numEntries uint32
	size       uint32
}

// tableRule is one entry of a chain. Its bytes live in one of the table's
// sources (src 0: the blob read from the kernel; others: the encoders'
// arenas); rules of a chain are linked through next, in the table's pool.
type tableRule struct {
	next   int32
	jump   int32 // chain index, for kindJump
	oldIdx int32 // the entry's index in the blob read, -1 for a new rule
	off    uint32
	size   uint32
	src    uint16
	kind   uint8
}

// chain is a built-in (hook >= 0) or user-defined chain.
type chain struct {
	name        string
	hook        int8
	deleted     bool
	polCtrMode  uint8
	verdict     int32 // a built-in chain's policy
	first, last int32 // rule pool indices, -1 when empty
	n           int32 // rules
	refs        int32 // jumps to it
	bytes       uint64
	polOldIdx   int32
	polCtr      [2]uint64
	// laid out by marshal
	headOff  uint32
	firstIdx uint32
}

// table is an iptables table as libiptc holds it between reading it and
// committing it: chains with their rules, every rule's bytes kept as read
// or as encoded.
type table struct {
	fam     Family
	lay     *entryLayout
	name    string
	info    info
	srcs    [][]byte
	mem     []byte // what holds srcs[0], to free
	chains  []chain
	byName  map[string]int32
	rules   []tableRule
	changed bool
	nUser   int
	// keepPolicy: RestoreOptions.KeepPolicyCounters.
	keepPolicy bool

	lastLookup int32
}

func u16(b []byte) int    { return int(binary.NativeEndian.Uint16(b)) }
func u32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }
func i32(b []byte) int32  { return int32(binary.NativeEndian.Uint32(b)) }

// cstring is the NUL-terminated string at the start of b, aliasing it.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func unsupportedf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

// parseTable reads blob, the entries of table name as IPT_SO_GET_ENTRIES
// returned them, into chains. The table aliases blob (and chain names
// alias it). Anything libiptc would not lay out the same way again (a
// jump into the middle of a chain, a built-in chain after a user chain,
// a chain without its last entry) is ErrUnsupported.
func parseTable(fam Family, name string, inf info, blob []byte) (*table, error) {
	lay := &entryLayouts[fam]
	t := &table{fam: fam, lay: lay, name: name, info: inf, srcs: [][]byte{blob}, lastLookup: -1}
	// a user chain is at least two entries (head, RETURN) and the
	// engines' average about five: room for a quarter of the entries
	t.rules = make([]tableRule, 0, inf.numEntries)
	t.chains = make([]chain, 0, inf.numEntries/4+numHooks)
	t.byName = make(map[string]int32, inf.numEntries/4+numHooks)
	size := len(blob)
	if uint32(size) != inf.size {
		return nil, fmt.Errorf("xtblob: %s: %d bytes of entries, the table says %d", name, size, inf.size)
	}
	cur := int32(-1)
	var idx int32
	userSeen := false
	// heads of user chains in blob order: jump verdicts are found among them.
	heads := make([]uint32, 0, inf.numEntries/4)
	headChains := make([]int32, 0, inf.numEntries/4)
	closeChain := func() error {
		if cur < 0 {
			return nil
		}
		c := &t.chains[cur]
		if c.last < 0 {
			return unsupportedf("%s: chain %s has no policy or RETURN entry", name, c.name)
		}
		// the chain's last entry is its foot: the policy of a built-in
		// chain, the RETURN of a user chain.
		foot := &t.rules[c.last]
		e := blob[foot.off : foot.off+foot.size]
		to := u16(e[lay.targetOffsetAt:])
		if to != lay.entrySize || foot.kind != kindStandard {
			return unsupportedf("%s: chain %s does not end in an unconditional verdict", name, c.name)
		}
		if c.hook >= 0 {
			c.verdict = i32(e[to+targetHeader:])
			c.polCtrMode = ctrZeroed
			c.polOldIdx = foot.oldIdx
			c.polCtr[0] = binary.NativeEndian.Uint64(e[lay.countersAt:])
			c.polCtr[1] = binary.NativeEndian.Uint64(e[lay.countersAt+8:])
		}
		// unlink the foot
		c.bytes -= uint64(foot.size)
		c.n--
		if c.first == c.last {
			c.first, c.last = -1, -1
		} else {
			p := c.first
			for t.rules[p].next != c.last {
				p = t.rules[p].next
			}
			t.rules[p].next = -1
			c.last = p
		}
		t.rules = t.rules[:len(t.rules)-1]
		return nil
	}
	for off := 0; off < size; idx++ {
		if size-off < lay.entrySize {
			return nil, fmt.Errorf("xtblob: %s: truncated entry at %d", name, off)
		}
		e := blob[off:]
		next := u16(e[lay.nextOffsetAt:])
		to := u16(e[lay.targetOffsetAt:])
		if next < lay.entrySize+targetHeader || next > size-off || to < lay.entrySize || to+targetHeader > next {
			return nil, fmt.Errorf("xtblob: %s: bad entry at %d", name, off)
		}
		e = e[:next]
		tgt := e[to:]
		tsize := u16(tgt)
		tname := cstring(tgt[targetNameAt : targetNameAt+targetNameLen])
		if off+next == size { // the table's final ERROR entry
			if err := closeChain(); err != nil {
				return nil, err
			}
			off += next
			idx++
			break
		}
		hook := -1
		for h := 0; h < numHooks; h++ {
			if inf.validHooks&(1<<h) != 0 && inf.hookEntry[h] == uint32(off) {
				hook = h
			}
		}
		switch {
		case tname == errorTargetStr:
			if err := closeChain(); err != nil {
				return nil, err
			}
			if tsize < errorSize || next < to+errorSize {
				return nil, unsupportedf("%s: short ERROR entry at %d", name, off)
			}
			cname := cstring(tgt[targetHeader : targetHeader+errorNameLen])
			cur = t.addChain(cname, -1)
			t.chains[cur].headOff = uint32(off)
			heads = append(heads, uint32(off+next))
			headChains = append(headChains, cur)
			userSeen = true
			off += next
			continue
		case hook >= 0:
			if err := closeChain(); err != nil {
				return nil, err
			}
			if userSeen {
				return nil, unsupportedf("%s: built-in chain %s after user chains", name, hookNames[hook])
			}
			if _, dup := t.byName[hookNames[hook]]; dup {
				return nil, unsupportedf("%s: two entries of hook %d", name, hook)
			}
			cur = t.addChain(hookNames[hook], int8(hook))
		}
		if cur < 0 {
			return nil, unsupportedf("%s: entry at %d outside any chain", name, off)
		}
		r := tableRule{next: -1, jump: -1, oldIdx: idx, off: uint32(off), size: uint32(next)}
		switch {
		case tname != "":
			r.kind = kindModule
		case tsize != standardSize:
			return nil, unsupportedf("%s: standard target of %d bytes at %d", name, tsize, off)
		default:
			v := i32(tgt[targetHeader:])
			switch {
			case v < 0:
				r.kind = kindStandard
			case int(v) == off+next:
				r.kind = kindFallthrough
			default:
				r.kind = kindJump // resolved below, once every chain is known
			}
		}
		t.appendRule(cur, r)
		off += next
	}
	if idx != int32(inf.numEntries) {
		return nil, fmt.Errorf("xtblob: %s: %d entries, the table says %d", name, idx, inf.numEntries)
	}
	for h := 0; h < numHooks; h++ {
		if inf.validHooks&(1<<h) == 0 {
			continue
		}
		if _, ok := t.byName[hookNames[h]]; !ok {
			return nil, unsupportedf("%s: hook %s has no chain", name, hookNames[h])
		}
	}
	// resolve jumps: a verdict must be the first rule of a user chain
	// (its head's offset plus the head's size).
	for i := range t.rules {
		r := &t.rules[i]
		if r.kind != kindJump {
			continue
		}
		e := blob[r.off : r.off+r.size]
		v := uint32(i32(e[u16(e[lay.targetOffsetAt:])+targetHeader:]))
		k, ok := slices.BinarySearch(heads, v)
		if !ok {
			return nil, unsupportedf("%s: a jump to offset %d, not the start of a chain", name, v)
		}
		r.jump = headChains[k]
		t.chains[r.jump].refs++
	}
	return t, nil
}

// reserve makes room for chains more chains and rules more rules.
func (t *table) reserve(chains, rules int) {
	t.chains = slices.Grow(t.chains, chains)
	t.rules = slices.Grow(t.rules, rules)
	if len(t.byName) < chains {
		m := make(map[string]int32, len(t.byName)+chains)
		for k, v := range t.byName {
			m[k] = v
		}
		t.byName = m
	}
}

func (t *table) addChain(name string, hook int8) int32 {
	i := int32(len(t.chains))
	t.chains = append(t.chains, chain{name: name, hook: hook, first: -1, last: -1, polOldIdx: -1})
	t.byName[name] = i
	if hook < 0 {
		t.nUser++
	}
	return i
}

func (t *table) appendRule(ci int32, r tableRule) {
	ri := int32(len(t.rules))
	r.next = -1
	t.rules = append(t.rules, r)
	c := &t.chains[ci]
	if c.last < 0 {
		c.first = ri
	} else {
		t.rules[c.last].next = ri
	}
	c.last = ri
	c.n++
	c.bytes += uint64(r.size)
}

// insertRule puts r before the rule at position pos (0-based) of chain ci;
// pos == n appends.
func (t *table) insertRule(ci int32, pos int32, r tableRule) {
	c := &t.chains[ci]
	if pos >= c.n {
		t.appendRule(ci, r)
		return
	}
	ri := int32(len(t.rules))
	if pos == 0 {
		r.next = c.first
		c.first = ri
	} else {
		p := t.nth(ci, pos-1)
		r.next = t.rules[p].next
		t.rules[p].next = ri
	}
	t.rules = append(t.rules, r)
	c.n++
	c.bytes += uint64(r.size)
}

// nth is the pool index of the rule at position pos of chain ci.
func (t *table) nth(ci, pos int32) int32 {
	p := t.chains[ci].first
	for ; pos > 0; pos-- {
		p = t.rules[p].next
	}
	return p
}

// removeRule unlinks the rule after prev (prev -1: the first) from ci.
// removeNth removes the num-th (1-based, within range) rule of chain ci.
func (t *table) removeNth(ci, num int32) {
	prev := int32(-1)
	if num > 1 {
		prev = t.nth(ci, num-2)
	}
	t.removeRule(ci, prev)
}

func (t *table) removeRule(ci, prev int32) {
	c := &t.chains[ci]
	var ri int32
	if prev < 0 {
		ri = c.first
		c.first = t.rules[ri].next
	} else {
		ri = t.rules[prev].next
		t.rules[prev].next = t.rules[ri].next
	}
	if c.last == ri {
		c.last = prev
	}
	r := &t.rules[ri]
	if r.kind == kindJump {
		t.chains[r.jump].refs--
	}
	c.n--
	c.bytes -= uint64(r.size)
}

func (t *table) flush(ci int32) {
	c := &t.chains[ci]
	for p := c.first; p >= 0; p = t.rules[p].next {
		if r := &t.rules[p]; r.kind == kindJump {
			t.chains[r.jump].refs--
		}
	}
	c.first, c.last, c.n, c.bytes = -1, -1, 0, 0
}

func (t *table) entry(r *tableRule) []byte { return t.srcs[r.src][r.off : r.off+r.size] }

// lookup finds a live chain.
func (t *table) lookup(name string) (int32, bool) {
	ci, ok := t.byName[name]
	return ci, ok
}

// lookupCommand finds the chain of a command: consecutive lines mostly
// name the chain the line before named, which is tried first.
func (t *table) lookupCommand(name string) (int32, bool) {
	if t.lastLookup >= 0 {
		if c := &t.chains[t.lastLookup]; c.name == name && !c.deleted {
			return t.lastLookup, true
		}
	}
	ci, ok := t.byName[name]
	if ok {
		t.lastLookup = ci
	}
	return ci, ok
}

// chainOrder is the order libiptc writes chains in: the built-in ones as
// they were read (hook order), then the user chains sorted by name.
func (t *table) chainOrder() []int32 {
	order := make([]int32, 0, len(t.chains))
	var user []int32
	for i := range t.chains {
		c := &t.chains[i]
		switch {
		case c.deleted:
		case c.hook >= 0:
			order = append(order, int32(i))
		default:
			user = append(user, int32(i))
		}
	}
	sorted := true
	for i := 1; i < len(user); i++ {
		if t.chains[user[i-1]].name >= t.chains[user[i]].name {
			sorted = false
			break
		}
	}
	if !sorted {
		slices.SortFunc(user, func(a, b int32) int { return strings.Compare(t.chains[a].name, t.chains[b].name) })
	}
	return append(order, user...)
}

// layoutChains gives every chain in order its head offset and first
// entry index, and returns the blob's size and entry count.
func (t *table) layoutChains(order []int32) (size uint64, entries uint32) {
	lay := t.lay
	for _, ci := range order {
		c := &t.chains[ci]
		c.headOff = uint32(size)
		c.firstIdx = entries
		if c.hook < 0 {
			size += uint64(lay.headSize())
			entries++
		}
		size += c.bytes + uint64(lay.footSize())
		entries += uint32(c.n) + 1
	}
	size += uint64(lay.headSize())
	entries++
	return size, entries
}

// jumpVerdict is where a jump to chain ci lands: its first rule, past the
// ERROR head.
func (t *table) jumpVerdict(ci int32) int32 {
	return int32(t.chains[ci].headOff) + int32(t.lay.headSize())
}

// marshalChains writes chains order (laid out by layoutChains) into
// blob, the entries of the replace. Chains write disjoint parts of blob,
// so parts of order can be written concurrently.
func (t *table) marshalChains(order []int32, blob []byte) {
	lay := t.lay
	for _, ci := range order {
		c := &t.chains[ci]
		off := int(c.headOff)
		if c.hook < 0 {
			t.putErrorEntry(blob[off:off+lay.headSize()], c.name)
			off += lay.headSize()
		}
		for p := c.first; p >= 0; p = t.rules[p].next {
			r := &t.rules[p]
			e := blob[off : off+int(r.size)]
			copy(e, t.entry(r))
			to := u16(e[lay.targetOffsetAt:])
			switch r.kind {
			case kindJump:
				tg := e[to:]
				clear(tg[targetNameAt : targetRevAt+1])
				binary.NativeEndian.PutUint32(tg[targetHeader:], uint32(t.jumpVerdict(r.jump)))
			case kindFallthrough:
				binary.NativeEndian.PutUint32(e[to+targetHeader:], uint32(off+int(r.size)))
			}
			off += int(r.size)
		}
		f := blob[off : off+lay.footSize()]
		clear(f)
		binary.NativeEndian.PutUint16(f[lay.targetOffsetAt:], uint16(lay.entrySize))
		binary.NativeEndian.PutUint16(f[lay.nextOffsetAt:], uint16(lay.footSize()))
		binary.NativeEndian.PutUint16(f[lay.entrySize:], standardSize)
		v := int32(verdictReturn)
		if c.hook >= 0 {
			v = c.verdict
		}
		binary.NativeEndian.PutUint32(f[lay.entrySize+targetHeader:], uint32(v))
	}
}

// fillCounters writes into ctrs (pcnt, bcnt pairs by new entry index)
// the counters libiptc gives the entries after a replace: a rule read
// from the kernel keeps its own (old: the counters the replace returned,
// by old index), a new one starts at zero, a built-in chain's policy as
// its counter mode says. Heads, RETURNs and the final entry count nothing.
func (t *table) fillCounters(order []int32, ctrs, old []uint64) {
	clear(ctrs)
	for _, ci := range order {
		c := &t.chains[ci]
		idx := c.firstIdx
		if c.hook < 0 {
			idx++
		}
		for p := c.first; p >= 0; p = t.rules[p].next {
			r := &t.rules[p]
			if r.oldIdx >= 0 && 2*int(r.oldIdx)+1 < len(old) {
				ctrs[2*idx] = old[2*r.oldIdx]
				ctrs[2*idx+1] = old[2*r.oldIdx+1]
			}
			idx++
		}
		if c.hook < 0 {
			continue
		}
		switch c.polCtrMode {
		case ctrZeroed:
			if c.polOldIdx >= 0 && 2*int(c.polOldIdx)+1 < len(old) {
				ctrs[2*idx] = old[2*c.polOldIdx]
				ctrs[2*idx+1] = old[2*c.polOldIdx+1]
				if !t.keepPolicy {
					ctrs[2*idx] -= c.polCtr[0]
					ctrs[2*idx+1] -= c.polCtr[1]
				}
			}
		case ctrSet:
			ctrs[2*idx], ctrs[2*idx+1] = c.polCtr[0], c.polCtr[1]
		}
	}
}

// marshalTail writes the table's final ERROR entry at off.
func (t *table) marshalTail(blob []byte, off int) {
	t.putErrorEntry(blob[off:off+t.lay.headSize()], errorTargetStr)
}

// putErrorEntry writes into h (headSize bytes) an entry with the ERROR
// target holding name: a user chain's head, or the table's tail.
func (t *table) putErrorEntry(h []byte, name string) {
	lay := t.lay
	clear(h)
	binary.NativeEndian.PutUint16(h[lay.targetOffsetAt:], uint16(lay.entrySize))
	binary.NativeEndian.PutUint16(h[lay.nextOffsetAt:], uint16(lay.headSize()))
	tg := h[lay.entrySize:]
	binary.NativeEndian.PutUint16(tg, errorSize)
	copy(tg[targetNameAt:], errorTargetStr)
	copy(tg[targetHeader:targetHeader+errorNameLen-1], name)
}

// hooks returns the replace's hook_entry and underflow: where each
// built-in chain starts and where its policy is.
func (t *table) hooks() (entry, underflow [numHooks]uint32) {
	for i := range t.chains {
		c := &t.chains[i]
		if c.hook < 0 || c.deleted {
			continue
		}
		entry[c.hook] = c.headOff
		underflow[c.hook] = c.headOff + uint32(c.bytes)
	}
	return entry, underflow
}
