//go:build linux

package xtblob

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ipset's socket option interface (linux/netfilter/ipset/ip_set.h).
const (
	soIPSet          = 83         // SO_IP_SET, at SOL_IP
	ipsetOpVersion   = 0x00000100 // IP_SET_OP_VERSION
	ipsetOpGetFName  = 0x00000008 // IP_SET_OP_GET_FNAME: index and family by name
	ipsetInvalidID   = 65535      // IPSET_INVALID_ID
	ipsetMaxNameLen  = 32         // IPSET_MAXNAMELEN
	nfprotoUnspec    = 0
	nfprotoIPv4      = 2
	nfprotoIPv6      = 10
	ipsetReqFNameLen = 12 + ipsetMaxNameLen // struct ip_set_req_get_set_family
)

// KernelSetIndex returns a function for Encoder.SetIndex that asks the
// kernel (the network namespace of the calling thread) for the index of an
// ipset by name, as libxt_set does for -m set --match-set: a set that does
// not exist, or is of the other family, or any error answers ok false, so
// the rule is ErrUnsupported and the caller's iptables tool reports it.
// Answers are remembered, so use a new function for each restore (a set
// destroyed and created again may get another index), and one per
// goroutine: the function is not safe for concurrent use.
func KernelSetIndex(fam Family) func(name []byte) (index uint16, ok bool) {
	known := map[string]uint16{}
	return func(name []byte) (uint16, bool) {
		if i, ok := known[string(name)]; ok {
			return i, true
		}
		i, ok := lookupSetIndex(fam, name)
		if ok {
			known[string(name)] = i
		}
		return i, ok
	}
}

func lookupSetIndex(fam Family, name []byte) (uint16, bool) {
	if len(name) == 0 || len(name) >= ipsetMaxNameLen {
		return 0, false
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	ne := binary.NativeEndian
	// struct ip_set_req_version: op, version (the kernel's, in reply).
	var ver [8]byte
	ne.PutUint32(ver[0:], ipsetOpVersion)
	size := uint32(len(ver))
	if sockopt(fd, unsafe.Pointer(&ver[0]), &size) != nil {
		return 0, false
	}
	var req [ipsetReqFNameLen]byte
	ne.PutUint32(req[0:], ipsetOpGetFName)
	copy(req[4:8], ver[4:8])
	copy(req[12:], name)
	size = uint32(len(req))
	if sockopt(fd, unsafe.Pointer(&req[0]), &size) != nil {
		return 0, false
	}
	index := ne.Uint16(req[12:])
	family := ne.Uint32(req[8:])
	want := uint32(nfprotoIPv4)
	if fam == IPv6 {
		want = nfprotoIPv6
	}
	if index == ipsetInvalidID || family != want && family != nfprotoUnspec {
		return 0, false
	}
	return index, true
}

func sockopt(fd int, p unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, soIPSet,
		uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Socket options asking x_tables whether it has a revision of a match or
// a target (IPT_SO_GET_REVISION_MATCH/_TARGET, IP6T_ the same + 2).
const (
	soGetRevisionMatch = 66 // the target's is one more
)

// CheckKernelRevisions asks the kernel (the calling thread's network
// namespace; it loads the modules as iptables would) whether it has every
// match and target revision the Encoder writes for fam. The encoder writes
// the revisions iptables-legacy 1.8.9 picks on kernels that have them (its
// newest); on an older kernel it would pick older ones, so an error here,
// wrapping ErrUnsupported and naming the extension, means the iptables
// tool must be used. The answer does not change while the kernel runs:
// call it once.
func CheckKernelRevisions(fam Family) error {
	for kind := extComment; kind <= extReject; kind++ {
		sp := kind.spec(fam)
		if sp.name == "" { // the standard target is x_tables' own
			continue
		}
		if err := kernelHasRevision(fam, kind >= extStandard, sp.name, sp.rev); err != nil {
			return err
		}
	}
	return nil
}

// loadTablesModule runs the kernel's modprobe (-q) for ip_tables or
// ip6_tables, as libxtables' xtables_load_ko does; it reports whether the
// command succeeded.
func loadTablesModule(fam Family) bool {
	mod := "ip_tables"
	if fam == IPv6 {
		mod = "ip6_tables"
	}
	path := "/sbin/modprobe"
	if b, err := os.ReadFile("/proc/sys/kernel/modprobe"); err == nil && strings.TrimSpace(string(b)) != "" {
		path = strings.TrimSpace(string(b))
	}
	return exec.Command(path, "-q", mod).Run() == nil
}

// kernelHasRevision asks for one match (or target) revision.
func kernelHasRevision(fam Family, target bool, name string, rev uint8) error {
	domain, level, opt := unix.AF_INET, unix.SOL_IP, soGetRevisionMatch
	if fam == IPv6 {
		domain, level, opt = unix.AF_INET6, unix.SOL_IPV6, soGetRevisionMatch+2
	}
	what := "match"
	if target {
		opt++
		what = "target"
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("xtblob: raw socket: %w", err)
	}
	defer unix.Close(fd)
	// struct xt_get_revision: name[29], revision.
	var req [30]byte
	copy(req[:29], name)
	req[29] = rev
	ask := func() unix.Errno {
		size := uint32(len(req))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
			uintptr(unsafe.Pointer(&req[0])), uintptr(unsafe.Pointer(&size)), 0)
		return errno
	}
	errno := ask()
	if errno == unix.ENOPROTOOPT && loadTablesModule(fam) {
		// ip_tables (ip6_tables) was not loaded yet: on a node where no
		// iptables-legacy command has run since boot. Load it as
		// libxtables does before its own first request, and ask again.
		errno = ask()
	}
	if errno != 0 {
		return fmt.Errorf("%w: the kernel has no %s %s revision %d: %v", ErrUnsupported, what, name, rev, errno)
	}
	return nil
}
