//go:build linux

package xtables

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// ipt_getinfo / ip6t_getinfo of linux/netfilter_ipv{4,6}/ip{,6}_tables.h:
// the table's name, hooks, entry offsets, entry count and size.
type xtGetInfo struct {
	name       [32]byte
	validHooks uint32
	hookEntry  [5]uint32
	underflow  [5]uint32
	numEntries uint32
	size       uint32
}

// soGetInfo is IPT_SO_GET_INFO and IP6T_SO_GET_INFO (IPT_BASE_CTL + 0).
const soGetInfo = 64

// legacyTableStamp asks the kernel for table's size and entry count, in
// the calling thread's network namespace.
func legacyTableStamp(family v1.IPFamily, table Table) (uint64, bool, error) {
	domain, level := unix.AF_INET, unix.SOL_IP
	if family == v1.IPv6Protocol {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return 0, false, fmt.Errorf("xtables: raw socket for table info: %w", err)
	}
	defer unix.Close(fd)
	var info xtGetInfo
	if len(table) >= len(info.name) {
		return 0, false, fmt.Errorf("xtables: table name %q too long", table)
	}
	copy(info.name[:], table)
	size := uint32(unsafe.Sizeof(info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soGetInfo,
		uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
	switch {
	case errno == 0:
	case errors.Is(errno, unix.ENOENT), errors.Is(errno, unix.ENOPROTOOPT):
		return 0, false, nil // table (or x_tables) not loaded
	default:
		return 0, false, fmt.Errorf("xtables: table info of %s: %w", table, errno)
	}
	h := uint64(info.size)<<32 | uint64(info.numEntries)
	for _, off := range info.hookEntry {
		h = h*1099511628211 ^ uint64(off)
	}
	for _, off := range info.underflow {
		h = h*1099511628211 ^ uint64(off)
	}
	return h, true, nil
}
