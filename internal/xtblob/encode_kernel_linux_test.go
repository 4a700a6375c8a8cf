//go:build linux

package xtblob_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// kernelEntry is one entry of a table read back from the kernel.
type kernelEntry struct {
	off  int
	data []byte
}

// kernelChain is a chain of a table read back: its rules (without the
// policy or the user chain's closing RETURN) and where it starts.
type kernelChain struct {
	start int
	rules []kernelEntry
}

// entryLayout: where next_offset, target_offset, comefrom and the
// counters are in struct ipt_entry / ip6t_entry.
type entryLayout struct{ nextOffset, targetOffset, comefrom, counters, size int }

var (
	entry4 = entryLayout{nextOffset: 90, targetOffset: 88, comefrom: 92, counters: 96, size: 112}
	entry6 = entryLayout{nextOffset: 142, targetOffset: 140, comefrom: 144, counters: 152, size: 168}
)

func layoutOf(fam xtblob.Family) entryLayout {
	if fam == xtblob.IPv6 {
		return entry6
	}
	return entry4
}

// readTable reads table of the calling thread's network namespace with
// IPT_SO_GET_INFO and IPT_SO_GET_ENTRIES (IP6T_ for IPv6) and splits it
// into chains.
func readTable(fam xtblob.Family, table string) (map[string]*kernelChain, error) {
	domain, level := unix.AF_INET, unix.SOL_IP
	if fam == xtblob.IPv6 {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// struct ipt_getinfo: name[32], valid_hooks, hook_entry[5],
	// underflow[5], num_entries, size.
	var info [32 + 4 + 20 + 20 + 4 + 4]byte
	copy(info[:], table)
	size := uint32(len(info))
	if err := getsockopt(fd, level, 64, unsafe.Pointer(&info[0]), &size); err != nil {
		return nil, fmt.Errorf("get info of %s: %w", table, err)
	}
	ne := binary.NativeEndian
	validHooks := ne.Uint32(info[32:])
	blobSize := ne.Uint32(info[80:])
	buf := make([]byte, 40+int(blobSize))
	copy(buf, table)
	ne.PutUint32(buf[32:], blobSize)
	size = uint32(len(buf))
	if err := getsockopt(fd, level, 65, unsafe.Pointer(&buf[0]), &size); err != nil {
		return nil, fmt.Errorf("get entries of %s: %w", table, err)
	}
	blob := buf[40:]
	hookNames := []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	starts := map[int]string{}
	for h := range 5 {
		if validHooks&(1<<h) != 0 {
			starts[int(ne.Uint32(info[36+4*h:]))] = hookNames[h]
		}
	}
	lay := layoutOf(fam)
	chains := map[string]*kernelChain{}
	var cur *kernelChain
	for off := 0; off < len(blob); {
		next := int(ne.Uint16(blob[off+lay.nextOffset:]))
		if next < lay.size || off+next > len(blob) {
			return nil, fmt.Errorf("bad entry at %d", off)
		}
		e := blob[off : off+next]
		if name, ok := starts[off]; ok {
			cur = &kernelChain{start: off}
			chains[name] = cur
		}
		tOff := int(ne.Uint16(e[lay.targetOffset:]))
		tName := string(bytes.TrimRight(e[tOff+2:tOff+31], "\x00"))
		if tName == "ERROR" {
			name := string(bytes.TrimRight(e[tOff+32:tOff+32+32], "\x00"))
			cur = nil
			if name != "ERROR" {
				cur = &kernelChain{start: off + next}
				chains[name] = cur
			}
		} else if cur != nil {
			cur.rules = append(cur.rules, kernelEntry{off: off, data: e})
		}
		off += next
	}
	// The last entry of each chain is its policy (builtin chains) or its
	// RETURN (user chains).
	for _, c := range chains {
		if len(c.rules) > 0 {
			c.rules = c.rules[:len(c.rules)-1]
		}
	}
	return chains, nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

var builtinChains = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// restoreInput is an iptables-restore input that declares every user
// chain the rules of table name (as rule or as jump target) and appends
// the rules in order.
func restoreInput(t *testing.T, fam xtblob.Family, table string, rules []corpusRule) string {
	chains := map[string]bool{}
	enc := xtblob.NewEncoder(fam)
	enc.SetIndex = fakeSetIndex
	for _, r := range rules {
		if !builtinChains[r.Chain] {
			chains[r.Chain] = true
		}
		_, ref, err := enc.AppendRule(nil, []byte(r.Rule))
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if ref.Jump != nil {
			chains[string(ref.Jump)] = true
		}
	}
	names := make([]string, 0, len(chains))
	for c := range chains {
		names = append(names, c)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", table)
	for _, c := range names {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, r := range rules {
		fmt.Fprintf(&b, "-A %s %s\n", r.Chain, r.Rule)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// TestEncodeMatchesKernel restores the corpus with iptables-legacy-restore
// and ip6tables-legacy-restore in a fresh network namespace, reads each
// table back, and requires every entry's bytes to equal what AppendRule
// encodes for its line, but the counters and comefrom, which the kernel
// keeps; a jump's verdict must be the offset of the chain it names.
func TestEncodeMatchesKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	corpus := captureCorpus(t)
	for _, fam := range []xtblob.Family{xtblob.IPv4, xtblob.IPv6} {
		t.Run(famName(fam), func(t *testing.T) {
			netnstest.InFreshNetns(t, func() { checkFamilyInKernel(t, fam, corpus) })
		})
	}
}

func checkFamilyInKernel(t *testing.T, fam xtblob.Family, corpus []corpusRule) {
	tool := "iptables-legacy-restore"
	if fam == xtblob.IPv6 {
		tool = "ip6tables-legacy-restore"
	}
	byTable := map[string][]corpusRule{}
	var sets []string
	for _, r := range corpus {
		if r.Family == fam {
			byTable[r.Table] = append(byTable[r.Table], r)
		}
	}
	for _, r := range corpus {
		if r.Family == fam {
			sets = append(sets, setNames(r.Rule)...)
		}
	}
	setIndex := createSets(t, fam, sets)
	enc := xtblob.NewEncoder(fam)
	enc.SetIndex = xtblob.KernelSetIndex(fam)
	for name, want := range setIndex {
		if got, ok := enc.SetIndex([]byte(name)); !ok || got != want {
			t.Errorf("KernelSetIndex(%s) = %d, %v; want %d (the order of creation)", name, got, ok, want)
		}
	}
	if _, ok := enc.SetIndex([]byte("NO-SUCH-SET")); ok {
		t.Errorf("KernelSetIndex found a set that does not exist")
	}
	if len(setIndex) > 0 {
		other := xtblob.IPv6
		if fam == xtblob.IPv6 {
			other = xtblob.IPv4
		}
		for name := range setIndex {
			if _, ok := xtblob.KernelSetIndex(other)([]byte(name)); ok {
				t.Errorf("KernelSetIndex of the other family found %s", name)
			}
			break
		}
	}
	lay := layoutOf(fam)
	compared := 0
	for table, rules := range byTable {
		enc.Table = table
		input := restoreInput(t, fam, table, rules)
		cmd := exec.Command(tool)
		cmd.Stdin = strings.NewReader(input)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s of table %s: %v\n%s", tool, table, err, out)
		}
		chains, err := readTable(fam, table)
		if err != nil {
			t.Fatal(err)
		}
		// The rules of each chain, in order.
		want := map[string][]corpusRule{}
		for _, r := range rules {
			want[r.Chain] = append(want[r.Chain], r)
		}
		for chain, rs := range want {
			kc := chains[chain]
			if kc == nil || len(kc.rules) != len(rs) {
				t.Errorf("%s %s: kernel chain has %v rules, want %d", table, chain, kc, len(rs))
				continue
			}
			for i, r := range rs {
				got := append([]byte(nil), kc.rules[i].data...)
				buf, ref, err := enc.AppendRule(nil, []byte(r.Rule))
				if err != nil {
					t.Errorf("%s: %v", r, err)
					continue
				}
				clear(got[lay.comefrom : lay.comefrom+4])
				clear(got[lay.counters : lay.counters+16])
				if ref.Fallthrough {
					v := int(int32(binary.NativeEndian.Uint32(got[ref.VerdictAt:])))
					if want := kc.rules[i].off + len(got); v != want {
						t.Errorf("%s: verdict %d, want the next entry's offset %d", r, v, want)
					}
					clear(got[ref.VerdictAt : ref.VerdictAt+4])
				}
				if ref.Jump != nil {
					target := chains[string(ref.Jump)]
					v := int(int32(binary.NativeEndian.Uint32(got[ref.VerdictAt:])))
					if target == nil || v != target.start {
						t.Errorf("%s: verdict %d, want the offset of %s (%v)", r, v, ref.Jump, target)
					}
					clear(got[ref.VerdictAt : ref.VerdictAt+4])
				}
				if !bytes.Equal(buf, got) {
					t.Errorf("%s:\n%s", r, diffBytes(buf, got))
				}
				compared++
			}
		}
	}
	t.Logf("%d rules compared byte for byte", compared)
}

// diffBytes shows where two entries differ, 16 bytes a line.
func diffBytes(ours, kernel []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  ours %d bytes, kernel %d bytes\n", len(ours), len(kernel))
	n := max(len(ours), len(kernel))
	for off := 0; off < n; off += 16 {
		o := ours[min(off, len(ours)):min(off+16, len(ours))]
		k := kernel[min(off, len(kernel)):min(off+16, len(kernel))]
		if !bytes.Equal(o, k) {
			fmt.Fprintf(&b, "  %4d ours   % x\n  %4d kernel % x\n", off, o, off, k)
		}
	}
	return b.String()
}

// setNames returns the sets a rule's -m set --match-set options name.
func setNames(rule string) []string {
	var names []string
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "--match-set" {
			names = append(names, f[i+1])
		}
	}
	return names
}

// createSets creates the named sets (hash:ip,port of the family) in the
// namespace and returns their kernel indexes, which is the order of
// creation in a fresh namespace.
func createSets(t *testing.T, fam xtblob.Family, names []string) map[string]uint16 {
	index := map[string]uint16{}
	family := "inet"
	if fam == xtblob.IPv6 {
		family = "inet6"
	}
	for _, n := range names {
		if _, ok := index[n]; ok {
			continue
		}
		if out, err := exec.Command("ipset", "create", n, "hash:ip,port", "family", family).CombinedOutput(); err != nil {
			t.Fatalf("ipset create %s: %v\n%s", n, err, out)
		}
		index[n] = uint16(len(index))
	}
	return index
}

// TestCheckKernelRevisions: this kernel has every revision the encoder
// writes (TestEncodeMatchesKernel shows they are the ones iptables picks).
func TestCheckKernelRevisions(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	netnstest.InFreshNetns(t, func() {
		for _, fam := range []xtblob.Family{xtblob.IPv4, xtblob.IPv6} {
			if err := xtblob.CheckKernelRevisions(fam); err != nil {
				t.Errorf("%s: %v", famName(fam), err)
			}
		}
	})
}
