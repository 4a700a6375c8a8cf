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

// ipt_getinfo / ip6t_getinfo (linux/netfilter_ipv{4,6}/ip{,6}_tables.h).
type getInfo struct {
	name       [32]byte
	validHooks uint32
	hookEntry  [5]uint32
	underflow  [5]uint32
	numEntries uint32
	size       uint32
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
	domain, level := unix.AF_INET, unix.SOL_IP
	if ipv6 {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return d, false, fmt.Errorf("nfgen: raw socket: %w", err)
	}
	defer unix.Close(fd)
	var info getInfo
	if len(table) >= len(info.name) {
		return d, false, fmt.Errorf("nfgen: table name %q too long", table)
	}
	copy(info.name[:], table)
	size := uint32(unsafe.Sizeof(info))
	if errno := getsockopt(fd, level, soGetInfo, unsafe.Pointer(&info), &size); errno != 0 {
		if errno == unix.ENOENT || errno == unix.ENOPROTOOPT {
			return d, false, nil
		}
		return d, false, fmt.Errorf("nfgen: table info of %s: %w", table, errno)
	}
	h := uint64(info.size)
	for _, off := range append(info.hookEntry[:], info.underflow[:]...) {
		h = (h ^ uint64(off)) * 1099511628211
	}
	return Digest{Hash: h, Entries: info.numEntries, Size: info.size}, true, nil
}

// LegacyDigest fingerprints an iptables-legacy table of the calling
// thread's network namespace (ipv6: the ip6tables one): one copy of the
// table's blob from the kernel, hashed with seed skipping each entry's
// counters. ok is false when the table (or x_tables) is not loaded.
// Hashes are comparable only under the same seed. It copies the whole
// blob (BenchmarkKernelLegacyDigest in BENCHMARKS.md has the cost), which
// is why the engines use LegacyInfo.
func LegacyDigest(ipv6 bool, table string, seed maphash.Seed) (d Digest, ok bool, err error) {
	domain, level := unix.AF_INET, unix.SOL_IP
	nextAt, ctrAt, minSize := nextOffsetAt, countersAt, minEntrySize
	if ipv6 {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
		nextAt, ctrAt, minSize = nextOffsetAt6, countersAt6, minEntrySize6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return d, false, fmt.Errorf("nfgen: raw socket: %w", err)
	}
	defer unix.Close(fd)
	var info getInfo
	if len(table) >= len(info.name) {
		return d, false, fmt.Errorf("nfgen: table name %q too long", table)
	}
	var buf []byte
	for attempt := 0; ; attempt++ {
		info = getInfo{}
		copy(info.name[:], table)
		size := uint32(unsafe.Sizeof(info))
		if errno := getsockopt(fd, level, soGetInfo, unsafe.Pointer(&info), &size); errno != 0 {
			if errno == unix.ENOENT || errno == unix.ENOPROTOOPT {
				return d, false, nil
			}
			return d, false, fmt.Errorf("nfgen: table info of %s: %w", table, errno)
		}
		n := getEntriesHeader + int(info.size)
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		clear(buf[:getEntriesHeader])
		copy(buf, table)
		binary.NativeEndian.PutUint32(buf[32:], info.size)
		size = uint32(n)
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
	for i, off := range append(info.hookEntry[:], info.underflow[:]...) {
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
	return Digest{Hash: h.Sum64(), Entries: entries, Size: info.size}, true, nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, size *uint32) unix.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	return errno
}
