//go:build linux

package xtblob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/nfgen"
)

// Socket options of x_tables (IPT_BASE_CTL, the same numbers for IP6T_ on
// SOL_IPV6) and the sizes of the structures they take.
const (
	soSetReplace     = 64 // IPT_SO_SET_REPLACE
	soSetAddCounters = 65 // IPT_SO_SET_ADD_COUNTERS
	soGetEntries     = 65 // IPT_SO_GET_ENTRIES

	getEntriesHeader = 40 // struct ipt_get_entries: name, size, padding to the entries
	replaceHeader    = 96 // struct ipt_replace up to its entries
	countersHeader   = 40 // struct xt_counters_info: name, num_counters, padding
	tableNameLen     = 32 // XT_TABLE_MAXNAMELEN

	// replaceRetries bounds the re-reads when the table changed between
	// our read and our replace (EAGAIN); getEntriesRetries the same for a
	// table that changed between its info and its entries.
	replaceRetries    = 3
	getEntriesRetries = 3
)

// Restore applies data, an iptables-restore input, to the iptables-legacy
// tables (fam IPv6: ip6tables) of the calling thread's network namespace
// as `iptables-legacy-restore --noflush` would, from this process: each
// table named in data is read once (IPT_SO_GET_ENTRIES), every line is
// applied to it in memory, and it is written back in one
// IPT_SO_SET_REPLACE, every entry kept keeping its counters.
//
// The lines: `*table`, `COMMIT`, comments, `:CHAIN POLICY [p:b]` (create
// a user chain or flush it if it exists; a built-in chain's policy is
// set and its counters zeroed), and the commands -A, -I [n], -D (a rule
// or a number), -R n, -F [CHAIN], -N, -X [CHAIN] and -P with rules in
// Encoder's vocabulary. Anything else is an error wrapping
// ErrUnsupported. With RestoreOptions.Lines the declarations and -A lines
// are read from their types, with the same result.
//
// The whole input is parsed, encoded and applied before any table is
// written: an error for a line (a *RestoreError naming it and its table,
// wrapping ErrUnsupported when the caller should run the tool instead)
// means nothing was written. This is stricter than the tool, which
// commits each table at its COMMIT. A table the kernel refuses (say, a
// loop of jumps) fails after the tables before it were written.
//
// Restore holds the xtables lock (RestoreOptions.LockFile) from the
// first read to the last write; an error wrapping ErrLockHeld means it
// could not get it in time. A table that changed under it between read
// and write (EAGAIN: a writer that ignores the lock) is read and changed
// again, up to three times. data must not change during the call.
func Restore(fam Family, data []byte, opts RestoreOptions) error {
	if fam != IPv4 && fam != IPv6 {
		return fmt.Errorf("xtblob: unknown family %d", fam)
	}
	p := opts.parse(fam, data)
	p.encode(opts.Workers, p.encoders(fam, &opts))
	defer p.free()
	if err := p.firstUnsupported(); err != nil {
		return err
	}

	unlock, err := lockXtables(&opts)
	if err != nil {
		return err
	}
	defer unlock()

	k, err := openKernel(fam)
	if err != nil {
		return err
	}
	defer k.close()
	tables := map[string]*table{}
	defer func() {
		for _, t := range tables {
			freeBig(t.mem)
		}
	}()
	read := func(name string) (*table, error) {
		t, err := k.readTable(name)
		if t != nil {
			t.keepPolicy = opts.KeepPolicyCounters
		}
		return t, err
	}
	if err := p.apply(tables, read, ""); err != nil {
		return err
	}
	var written []string
	for _, name := range p.tables {
		for attempt := 0; ; attempt++ {
			t := tables[name]
			if t == nil || !t.changed {
				break
			}
			if opts.beforeCommit != nil {
				opts.beforeCommit(name)
			}
			replaced, err := k.commit(t)
			if replaced {
				written = append(written, name)
			}
			if err == nil {
				break
			}
			if replaced || !errors.Is(err, unix.EAGAIN) || attempt == replaceRetries {
				return partial(written, err)
			}
			freeBig(t.mem)
			delete(tables, name)
			if err := p.apply(tables, read, name); err != nil {
				return partial(written, err)
			}
		}
	}
	return nil
}

// encoders returns what makes the encoder of each encoding goroutine.
func (p *plan) encoders(fam Family, opts *RestoreOptions) func(Family) ruleEncoder {
	if opts.newEncoder != nil {
		return opts.newEncoder
	}
	// -m set stores the set's kernel index, which only this thread (in
	// the caller's network namespace) can ask for: the encoding
	// goroutines are anywhere.
	index := p.setIndexes(fam)
	return func(f Family) ruleEncoder {
		e := NewEncoder(f)
		e.SetIndex = func(name []byte) (uint16, bool) {
			i, ok := index[string(name)]
			return i, ok
		}
		return e
	}
}

// ChainNames lists the chains of table (built-in and user-defined) as the
// kernel holds them, in the calling thread's network namespace. It copies
// the table out (IPT_SO_GET_ENTRIES) without the xtables lock; ok is
// false when the table does not exist.
func ChainNames(fam Family, name string) (names []string, ok bool, err error) {
	if fam != IPv4 && fam != IPv6 {
		return nil, false, fmt.Errorf("xtblob: unknown family %d", fam)
	}
	k, err := openKernel(fam)
	if err != nil {
		return nil, false, err
	}
	defer k.close()
	t, err := k.readTable(name)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer freeBig(t.mem)
	names = make([]string, 0, len(t.chains))
	for i := range t.chains {
		if !t.chains[i].deleted {
			// The name points into the table's memory, unmapped below.
			names = append(names, strings.Clone(t.chains[i].name))
		}
	}
	return names, true, nil
}

// firstUnsupported is the first line (in input order) that is
// ErrUnsupported, as a *RestoreError: it is reported before the tables
// are locked or read, since the caller runs the tool instead.
func (p *plan) firstUnsupported() error {
	cur := ""
	for i := range p.ops {
		o := &p.ops[i]
		var err error
		switch {
		case o.kind == opTable:
			cur = p.str(o.arg)
		case o.kind == opFail:
			err = p.lineErr[o.line]
		case o.enc >= 0 && p.encs[o.enc].failed:
			err = p.encErr[o.enc]
		}
		if err != nil && errors.Is(err, ErrUnsupported) {
			return &RestoreError{Line: int(o.line), Table: cur, Err: err}
		}
	}
	return nil
}

// kernel is a raw socket of the family, for the x_tables socket options.
type kernel struct {
	fam   Family
	fd    int
	level int
}

func openKernel(fam Family) (*kernel, error) {
	domain, level := unix.AF_INET, unix.SOL_IP
	if fam == IPv6 {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("xtblob: raw socket: %w", err)
	}
	return &kernel{fam: fam, fd: fd, level: level}, nil
}

func (k *kernel) close() { unix.Close(k.fd) }

func (k *kernel) getsockopt(opt int, p unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(k.fd), uintptr(k.level), uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (k *kernel) setsockopt(opt int, b []byte) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(k.fd), uintptr(k.level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// readTable reads table name (its info through nfgen.ReadTableInfo, then
// its entries into memory outside the Go heap, which the table keeps as
// its source 0).
func (k *kernel) readTable(name string) (*table, error) {
	if len(name) >= tableNameLen {
		return nil, fmt.Errorf("table name %q too long", name)
	}
	for attempt := 0; ; attempt++ {
		gi, err := nfgen.ReadTableInfo(k.fd, k.fam == IPv6, name)
		if err != nil {
			return nil, fmt.Errorf("can't initialize table `%s': %w", name, err)
		}
		inf := info{validHooks: gi.ValidHooks, hookEntry: gi.HookEntry, underflow: gi.Underflow,
			numEntries: gi.NumEntries, size: gi.Size}
		buf := allocBig(getEntriesHeader + int(inf.size))
		copy(buf, name)
		binary.NativeEndian.PutUint32(buf[32:], inf.size)
		size := uint32(len(buf))
		err = k.getsockopt(soGetEntries, unsafe.Pointer(&buf[0]), &size)
		if err == nil {
			// the table keeps the entries only; the header stays
			// allocated in front of them and is freed with them.
			t, err := parseTable(k.fam, name, inf, buf[getEntriesHeader:])
			if err != nil {
				freeBig(buf)
				return nil, err
			}
			t.mem = buf
			return t, nil
		}
		freeBig(buf)
		if !errors.Is(err, unix.EAGAIN) || attempt == getEntriesRetries {
			return nil, fmt.Errorf("entries of table `%s': %w", name, err)
		}
	}
}

// commit writes t in one replace, then gives its entries their counters
// (IPT_SO_SET_ADD_COUNTERS), as libiptc's TC_COMMIT. An error wrapping
// EAGAIN means the table changed since it was read. replaced reports
// whether the table was written (then only its counters failed).
func (k *kernel) commit(t *table) (replaced bool, err error) {
	order := t.chainOrder()
	size, n := t.layoutChains(order)
	if size > 1<<31 {
		return false, fmt.Errorf("table %s: %d bytes of entries", t.name, size)
	}
	repl := allocFilled(replaceHeader + int(size))
	defer freeBig(repl)
	nOld := int(t.info.numEntries)
	oldBuf := allocBig(16 * max(nOld, 1))
	defer freeBig(oldBuf)
	copy(repl, t.name)
	h := binary.NativeEndian
	h.PutUint32(repl[32:], t.info.validHooks)
	h.PutUint32(repl[36:], n)
	h.PutUint32(repl[40:], uint32(size))
	entry, underflow := t.hooks()
	for i := 0; i < numHooks; i++ {
		h.PutUint32(repl[44+4*i:], entry[i])
		h.PutUint32(repl[64+4*i:], underflow[i])
	}
	h.PutUint32(repl[84:], uint32(nOld))
	h.PutUint64(repl[88:], uint64(uintptr(unsafe.Pointer(&oldBuf[0]))))
	blob := repl[replaceHeader:]
	t.marshal(order, blob)
	if err := k.setsockopt(soSetReplace, repl); err != nil {
		return false, fmt.Errorf("table %s: replace: %w", t.name, err)
	}
	ctrBuf := allocBig(countersHeader + 16*int(n))
	defer freeBig(ctrBuf)
	copy(ctrBuf, t.name)
	h.PutUint32(ctrBuf[32:], n)
	ctrs := unsafe.Slice((*uint64)(unsafe.Pointer(&ctrBuf[countersHeader])), 2*int(n))
	old := unsafe.Slice((*uint64)(unsafe.Pointer(&oldBuf[0])), 2*nOld)
	t.fillCounters(order, ctrs, old)
	if err := k.setsockopt(soSetAddCounters, ctrBuf); err != nil {
		return true, fmt.Errorf("table %s: counters: %w", t.name, err)
	}
	return true, nil
}

// marshal writes the whole blob, splitting the chains among goroutines
// when the table is large.
func (t *table) marshal(order []int32, blob []byte) {
	const perWorker = 8 << 20
	workers := min(runtime.GOMAXPROCS(0), len(blob)/perWorker+1)
	if workers <= 1 {
		t.marshalChains(order, blob)
	} else {
		var wg sync.WaitGroup
		lo := 0
		for w := 1; w <= workers; w++ {
			hi := len(order)
			if w < workers {
				cut := uint32(len(blob) * w / workers)
				hi = lo
				for hi < len(order) && t.chains[order[hi]].headOff < cut {
					hi++
				}
			}
			part := order[lo:hi]
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.marshalChains(part, blob)
			}()
			lo = hi
		}
		wg.Wait()
	}
	t.marshalTail(blob, len(blob)-t.lay.headSize())
}

// allocBig returns n zeroed bytes outside the Go heap (an anonymous
// mapping, committed as it is touched), for the blobs of large tables.
func allocBig(n int) []byte {
	if n < 1<<16 {
		return make([]byte, n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return make([]byte, n)
	}
	return b
}

// allocFilled is allocBig for memory that will be written whole: its
// pages are faulted in by the mmap itself (MAP_POPULATE), in bulk.
func allocFilled(n int) []byte {
	if n < 1<<16 {
		return make([]byte, n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return allocBig(n)
	}
	return b
}

// freeBig releases what allocBig returned (the whole of it).
func freeBig(b []byte) {
	if cap(b) < 1<<16 {
		return
	}
	b = b[:cap(b)]
	if err := unix.Munmap(b); err != nil {
		_ = err // a heap fallback of allocBig: the GC has it
	}
}

// setIndexes asks the kernel for the index of every ipset the input's
// rules name with --match-set (the ipvs engine's rules), on the calling
// thread. A set it does not find is left out: its rules are then
// ErrUnsupported and the tool reports them.
func (p *plan) setIndexes(fam Family) map[string]uint16 {
	var index map[string]uint16
	var lookup func([]byte) (uint16, bool)
	flag := []byte("--match-set")
	for i := range p.encs {
		text := p.bytesOf(p.encs[i].text)
		if !bytes.Contains(text, flag) {
			continue
		}
		f := bytes.Fields(text)
		for j := 0; j+1 < len(f); j++ {
			if !bytes.Equal(f[j], flag) {
				continue
			}
			name := f[j+1]
			if _, ok := index[string(name)]; ok {
				continue
			}
			if lookup == nil {
				lookup, index = KernelSetIndex(fam), map[string]uint16{}
			}
			if k, ok := lookup(name); ok {
				index[string(name)] = k
			}
		}
	}
	return index
}
