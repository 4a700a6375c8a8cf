//go:build linux

package nfgen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"unsafe"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Generation returns the nftables ruleset generation id of the calling
// thread's network namespace: it increments on every committed nftables
// transaction there (any table, any family, iptables-nft's included).
// Reading it commits nothing.
func Generation() (uint32, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return 0, fmt.Errorf("nfgen: netlink: %w", err)
	}
	defer conn.Close()
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("nfgen: get generation: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("nfgen: generation reply: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
		if err := ad.Err(); err != nil {
			return 0, fmt.Errorf("nfgen: generation reply: %w", err)
		}
	}
	return 0, errors.New("nfgen: no generation id in the kernel's reply")
}

// TableInfo is what the kernel tells of an iptables-legacy table without
// copying its entries: struct ipt_getinfo (ip6t_getinfo for IPv6, the
// same layout) less the name. HookEntry and Underflow are byte offsets
// into the table's blob, indexed by netfilter hook (NF_INET_PRE_ROUTING
// to NF_INET_POST_ROUTING); only the hooks in ValidHooks mean anything.
type TableInfo struct {
	ValidHooks uint32
	HookEntry  [5]uint32
	Underflow  [5]uint32
	NumEntries uint32 // entries in the blob, the table's final ERROR entry included
	Size       uint32 // bytes of the blob
}

// getInfo is struct ipt_getinfo / ip6t_getinfo
// (linux/netfilter_ipv{4,6}/ip{,6}_tables.h).
type getInfo struct {
	name [32]byte
	TableInfo
}

// ReadTableInfo reads table's info (IPT_SO_GET_INFO; IP6T_SO_GET_INFO
// when ipv6) through fd, a raw socket of the family (AF_INET or AF_INET6)
// in the network namespace to read, which the caller keeps open for its
// next calls (say, IPT_SO_GET_ENTRIES of Info.Size bytes). It is the one
// reader of that info in svcproxy: LegacyInfo, LegacyDigest and the
// in-process writer (internal/xtblob) all use it. A failing call returns
// the kernel's errno (a unix.Errno): ENOENT when the table is not loaded,
// ENOPROTOOPT when x_tables is not.
func ReadTableInfo(fd int, ipv6 bool, table string) (TableInfo, error) {
	var info getInfo
	if len(table) >= len(info.name) {
		return TableInfo{}, fmt.Errorf("nfgen: table name %q too long", table)
	}
	copy(info.name[:], table)
	level := unix.SOL_IP
	if ipv6 {
		level = unix.SOL_IPV6
	}
	size := uint32(unsafe.Sizeof(info))
	if errno := getsockopt(fd, level, soGetInfo, unsafe.Pointer(&info), &size); errno != 0 {
		return TableInfo{}, errno
	}
	return info.TableInfo, nil
}

// rawSocket opens the raw socket of the family that the x_tables socket
// options go through.
func rawSocket(ipv6 bool) (int, error) {
	domain := unix.AF_INET
	if ipv6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return -1, fmt.Errorf("nfgen: raw socket: %w", err)
	}
	return fd, nil
}

// tableInfo is ReadTableInfo for LegacyInfo and LegacyDigest: ok is false
// when the table (or x_tables) is not loaded.
func tableInfo(fd int, ipv6 bool, table string) (info TableInfo, ok bool, err error) {
	info, err = ReadTableInfo(fd, ipv6, table)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOPROTOOPT) {
		return info, false, nil
	}
	if errno := unix.Errno(0); errors.As(err, &errno) {
		return info, false, fmt.Errorf("nfgen: table info of %s: %w", table, errno)
	}
	return info, err == nil, err
}

// Socket options (IPT_BASE_CTL + 0 and + 1; the same for IPv6) and the
// layout of struct ipt_get_entries and of the entries' counters (struct
// xt_counters inside ipt_entry / ip6t_entry).
const (
	soGetInfo         = 64
	soGetEntries      = 65
	getEntriesHeader  = 40 // name[32], size, padding to the entries' 8-byte alignment
	nextOffsetAt      = 90 // ipt_entry.next_offset; ip6t_entry: 142
	countersAt        = 96 // ipt_entry.counters; ip6t_entry: 152
	nextOffsetAt6     = 142
	countersAt6       = 152
	countersSize      = 16
	minEntrySize      = 112 // sizeof(struct ipt_entry); ip6t_entry: 168
	minEntrySize6     = 168
	getEntriesRetries = 3
)

// LegacyInfo reads only the table's info (IPT_SO_GET_INFO: blob size,
// entry count, hook offsets), in microseconds. Its Hash covers the size
// and the hook offsets, not the content: a change that keeps the size and
// the entry count goes unseen.
func LegacyInfo(ipv6 bool, table string) (d Digest, ok bool, err error) {
	fd, err := rawSocket(ipv6)
	if err != nil {
		return d, false, err
	}
	defer unix.Close(fd)
	info, ok, err := tableInfo(fd, ipv6, table)
	if !ok {
		return d, false, err
	}
	h := uint64(info.Size)
	for _, off := range append(info.HookEntry[:], info.Underflow[:]...) {
		h = (h ^ uint64(off)) * 1099511628211
	}
	return Digest{Hash: h, Entries: info.NumEntries, Size: info.Size}, true, nil
}

// LegacyDigest fingerprints an iptables-legacy table of the calling
// thread's network namespace (ipv6: the ip6tables one): one copy of the
// table's blob from the kernel, hashed with seed skipping each entry's
// counters. ok is false when the table (or x_tables) is not loaded.
// Hashes are comparable only under the same seed. It copies the whole
// blob (BenchmarkKernelLegacyDigest in BENCHMARKS.md has the cost), which
// is why the engines use LegacyInfo.
func LegacyDigest(ipv6 bool, table string, seed maphash.Seed) (d Digest, ok bool, err error) {
	level := unix.SOL_IP
	nextAt, ctrAt, minSize := nextOffsetAt, countersAt, minEntrySize
	if ipv6 {
		level = unix.SOL_IPV6
		nextAt, ctrAt, minSize = nextOffsetAt6, countersAt6, minEntrySize6
	}
	fd, err := rawSocket(ipv6)
	if err != nil {
		return d, false, err
	}
	defer unix.Close(fd)
	var info TableInfo
	var buf []byte
	for attempt := 0; ; attempt++ {
		info, ok, err = tableInfo(fd, ipv6, table)
		if !ok {
			return d, false, err
		}
		n := getEntriesHeader + int(info.Size)
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		clear(buf[:getEntriesHeader])
		copy(buf, table)
		binary.NativeEndian.PutUint32(buf[32:], info.Size)
		size := uint32(n)
		errno := getsockopt(fd, level, soGetEntries, unsafe.Pointer(&buf[0]), &size)
		if errno == 0 {
			break
		}
		// EAGAIN: the table changed size between the two calls.
		if errno != unix.EAGAIN || attempt == getEntriesRetries {
			return d, false, fmt.Errorf("nfgen: entries of %s: %w", table, errno)
		}
	}
	var h maphash.Hash
	h.SetSeed(seed)
	var hooks [40]byte
	for i, off := range append(info.HookEntry[:], info.Underflow[:]...) {
		binary.NativeEndian.PutUint32(hooks[4*i:], off)
	}
	h.Write(hooks[:])
	blob := buf[getEntriesHeader:]
	var entries uint32
	for len(blob) > 0 {
		if len(blob) < minSize {
			return d, false, fmt.Errorf("nfgen: entries of %s: truncated entry", table)
		}
		next := int(binary.NativeEndian.Uint16(blob[nextAt:]))
		if next < minSize || next > len(blob) {
			return d, false, fmt.Errorf("nfgen: entries of %s: bad entry size %d", table, next)
		}
		h.Write(blob[:ctrAt])
		h.Write(blob[ctrAt+countersSize : next])
		blob = blob[next:]
		entries++
	}
	return Digest{Hash: h.Sum64(), Entries: entries, Size: info.Size}, true, nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, size *uint32) unix.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	return errno
}
