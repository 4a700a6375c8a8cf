//go:build linux

package nftkernel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
)

// netlinkRuleLister asks the kernel directly, one rule dump per chain
// (the kernel finds a named chain by hash, while one dump of the whole
// table resumes every batch by walking the table from its start, which is
// quadratic in its size).
type netlinkRuleLister struct {
	family uint8
	table  string
}

// NewNetlinkRuleLister returns the netlink nftables.ChainCommentLister
// for the kube-proxy table of family, in the network namespace of the
// calling thread at each call.
func NewNetlinkRuleLister(family v1.IPFamily) nftables.ChainCommentLister {
	f := uint8(unix.NFPROTO_IPV4)
	if family == v1.IPv6Protocol {
		f = unix.NFPROTO_IPV6
	}
	return &netlinkRuleLister{family: f, table: nftables.TableName}
}

func (l *netlinkRuleLister) TableExists(_ context.Context) (bool, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return false, fmt.Errorf("netlink: %w", err)
	}
	defer conn.Close()
	te := netlink.NewAttributeEncoder()
	te.String(unix.NFTA_TABLE_NAME, l.table)
	attrs, err := te.Encode()
	if err != nil {
		return false, err
	}
	_, err = conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETTABLE),
			Flags: netlink.Request,
		},
		Data: append([]byte{l.family, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("netlink get table: %w", err)
	}
	return true, nil
}

func (l *netlinkRuleLister) ChainHeads(ctx context.Context, chains []string) (map[string]nftables.ChainHead, error) {
	// Sockets are opened here, on the caller's thread, so they belong to
	// its network namespace whichever threads the workers then run on.
	workers := min(runtime.GOMAXPROCS(0), 4, max(1, len(chains)/1024))
	fds := make([]int, 0, workers)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range workers {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		fds = append(fds, fd)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return nil, fmt.Errorf("netlink bind: %w", err)
		}
	}
	results := make([]map[string]nftables.ChainHead, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(chains)/workers, (w+1)*len(chains)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[w], errs[w] = l.perChain(ctx, fds[w], chains[lo:hi])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[string]nftables.ChainHead, len(chains))
	for _, r := range results {
		maps.Copy(out, r)
	}
	return out, nil
}

// perChain dumps the rules of each chain in turn on fd and keeps the first
// one's comment, counting the chain's rules (dumpRules).
func (l *netlinkRuleLister) perChain(ctx context.Context, fd int, chains []string) (map[string]nftables.ChainHead, error) {
	out := make(map[string]nftables.ChainHead, len(chains))
	err := l.dumpRules(ctx, fd, chains, func(chain string, first bool, data []byte) error {
		head := out[chain]
		head.Rules++
		if first {
			_, comment, err := parseRuleMessage(data)
			if err != nil {
				return err
			}
			head.Comment = comment
		}
		out[chain] = head
		return nil
	})
	return out, err
}

// RuleComments returns every rule's comment (nil: none) of each of chains
// that exists, in order, from one rule dump per chain on a socket of the
// calling thread's network namespace; a chain with no rules maps to an
// empty slice, a missing chain to nothing. It replaced one
// `nft --json list chain` process per chain of the self-check's sample:
// nft reads the elements of every set of the table to list one chain.
func (l *netlinkRuleLister) RuleComments(ctx context.Context, chains []string) (map[string][]*string, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// A chain's dump does not say whether the chain exists (an empty
	// chain and a missing one both end at once): a get of each says.
	exists := make(map[string]bool, len(chains))
	for _, c := range chains {
		ok, err := l.chainExists(fd, c)
		if err != nil {
			return nil, err
		}
		exists[c] = ok
	}
	out := make(map[string][]*string, len(chains))
	err = l.dumpRules(ctx, fd, chains, func(chain string, _ bool, data []byte) error {
		_, comment, err := parseRuleMessage(data)
		if err != nil {
			return err
		}
		out[chain] = append(out[chain], comment)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for c, ok := range exists {
		if _, listed := out[c]; ok && !listed {
			out[c] = []*string{}
		}
		if !ok {
			delete(out, c)
		}
	}
	return out, nil
}

// chainExists gets the chain (NFT_MSG_GETCHAIN, not a dump) on fd.
func (l *netlinkRuleLister) chainExists(fd int, chain string) (bool, error) {
	const seq = 1 << 31
	req := make([]byte, unix.NLMSG_HDRLEN, 512)
	req = append(req, l.family, unix.NFNETLINK_V0, 0, 0)
	req = appendStringAttr(req, unix.NFTA_CHAIN_TABLE, l.table)
	req = appendStringAttr(req, unix.NFTA_CHAIN_NAME, chain)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], uint16(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETCHAIN))
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], seq)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, fmt.Errorf("netlink get chain %s: %w", chain, err)
	}
	buf := make([]byte, 16<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return false, fmt.Errorf("netlink get chain %s: %w", chain, err)
		}
		b := buf[:n]
		for len(b) >= unix.NLMSG_HDRLEN {
			size := int(binary.NativeEndian.Uint32(b[0:]))
			if size < unix.NLMSG_HDRLEN || size > len(b) {
				return false, fmt.Errorf("netlink get chain %s: malformed message", chain)
			}
			if binary.NativeEndian.Uint32(b[8:]) == seq {
				data := b[unix.NLMSG_HDRLEN:size]
				switch binary.NativeEndian.Uint16(b[4:]) {
				case unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN:
					return true, nil
				case unix.NLMSG_ERROR:
					if len(data) < 4 {
						return false, fmt.Errorf("netlink get chain %s: malformed error", chain)
					}
					switch e := unix.Errno(-int32(binary.NativeEndian.Uint32(data))); e {
					case unix.ENOENT:
						return false, nil
					default:
						return false, fmt.Errorf("netlink get chain %s: %w", chain, e)
					}
				}
			}
			b = b[min(len(b), (size+3)&^3):]
		}
	}
}

// dumpRules dumps the rules of each chain in turn on fd, calling rule for
// each rule message (its nfgenmsg stripped; first for the chain's first
// rule). It talks to the socket directly, one request and its reply in
// one buffer reused throughout, several times faster on a large table
// than the same requests through mdlayher/netlink's Conn (which allocates
// per message and reads the end of each dump separately): the restart of
// BenchmarkKernelColdStartBench measures it (BENCHMARKS.md).
func (l *netlinkRuleLister) dumpRules(ctx context.Context, fd int, chains []string, rule func(chain string, first bool, data []byte) error) error {
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	buf := make([]byte, 64<<10)
	req := make([]byte, 0, 512)
	for i, chain := range chains {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		seq := uint32(i + 1)
		req = appendDumpRequest(req[:0], l.family, unix.NFT_MSG_GETRULE, seq, unix.NFTA_RULE_TABLE, l.table, unix.NFTA_RULE_CHAIN, chain)
		if err := unix.Sendto(fd, req, 0, sa); err != nil {
			return fmt.Errorf("netlink rule dump of %s: %w", chain, err)
		}
		first, done := true, false
		for !done {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				return fmt.Errorf("netlink rule dump of %s: %w", chain, err)
			}
			b := buf[:n]
			for len(b) >= unix.NLMSG_HDRLEN {
				size := int(binary.NativeEndian.Uint32(b[0:]))
				if size < unix.NLMSG_HDRLEN || size > len(b) {
					return fmt.Errorf("netlink rule dump of %s: malformed message", chain)
				}
				typ := binary.NativeEndian.Uint16(b[4:])
				if binary.NativeEndian.Uint32(b[8:]) == seq {
					data := b[unix.NLMSG_HDRLEN:size]
					switch typ {
					case unix.NLMSG_DONE:
						done = true
					case unix.NLMSG_ERROR:
						done = true
						if len(data) >= 4 {
							if e := unix.Errno(-int32(binary.NativeEndian.Uint32(data))); e != 0 && e != unix.ENOENT {
								return fmt.Errorf("netlink rule dump of %s: %w", chain, e)
							} // ENOENT: the chain went meanwhile
						}
					case unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE:
						if len(data) >= 4 {
							if err := rule(chain, first, data[4:]); err != nil {
								return err
							}
							first = false
						}
					}
				}
				b = b[min(len(b), (size+3)&^3):]
			}
		}
	}
	return nil
}

// appendDumpRequest appends a dump request of nftables message msg for
// the object name of table (their attributes of types tableAttr and
// nameAttr).
func appendDumpRequest(req []byte, family uint8, msg uint16, seq uint32, tableAttr uint16, table string, nameAttr uint16, name string) []byte {
	start := len(req)
	req = append(req, make([]byte, unix.NLMSG_HDRLEN)...)
	req = append(req, family, unix.NFNETLINK_V0, 0, 0)
	req = appendStringAttr(req, tableAttr, table)
	req = appendStringAttr(req, nameAttr, name)
	h := req[start:]
	binary.NativeEndian.PutUint32(h[0:], uint32(len(h)))
	binary.NativeEndian.PutUint16(h[4:], uint16(unix.NFNL_SUBSYS_NFTABLES<<8|msg))
	binary.NativeEndian.PutUint16(h[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(h[8:], seq)
	return req
}

// appendStringAttr appends a NUL-terminated string netlink attribute,
// padded to 4 bytes.
func appendStringAttr(b []byte, typ uint16, s string) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(s)+1))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, s...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// parseRuleMessage reads a rule's chain and comment (userdata TLV type 0,
// NUL-terminated).
func parseRuleMessage(b []byte) (chain string, comment *string, err error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return "", nil, err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_CHAIN:
			chain = ad.String()
		case unix.NFTA_RULE_USERDATA:
			ud := ad.Bytes()
			for len(ud) >= 2 {
				typ, n := ud[0], int(ud[1])
				if 2+n > len(ud) {
					break
				}
				if typ == 0 { // NFTNL_UDATA_RULE_COMMENT
					s := string(bytes.TrimRight(ud[2:2+n], "\x00"))
					comment = &s
				}
				ud = ud[2+n:]
			}
		}
	}
	return chain, comment, ad.Err()
}

var _ nftables.ChainCommentLister = (*netlinkRuleLister)(nil)

// ListElements lists the named set or map of the table with one element
// dump (NFT_MSG_GETSETELEM) on a socket of its own. The replies are kept
// as they came (the elements' attributes, a few dozen bytes each),
// counted, then handed to fn one element at a time, Key and Data pointing
// into them. It replaced google/nftables' GetSetByName and
// GetSetElements, which decoded every element into structures of their
// own: about 150 MB of garbage for a restart's 100,000 endpoint-map
// elements at 10,000 services, and a heap peak above the cold start's. A
// dump the kernel marks interrupted (the set changed meanwhile) is read
// again, up to three times.
func (l *netlinkRuleLister) ListElements(ctx context.Context, name string, start func(n int), fn func(nftables.ListedElement) error) error {
	var (
		raw         []byte
		n           int
		interrupted bool
		err         error
	)
	for try := 0; try < 3; try++ {
		if raw, n, interrupted, err = l.dumpElements(ctx, name); err != nil {
			return err
		}
		if !interrupted {
			break
		}
	}
	if interrupted {
		return fmt.Errorf("netlink element dump of %s interrupted three times", name)
	}
	start(n)
	return eachElement(raw, func(el []byte) error {
		le, err := parseElement(el)
		if err != nil {
			return fmt.Errorf("netlink: element of %s: %w", name, err)
		}
		return fn(le)
	})
}

// dumpElements reads the element dump of set name: the NFTA_SET_ELEM_LIST
// attributes of every reply, concatenated, and the number of elements.
func (l *netlinkRuleLister) dumpElements(ctx context.Context, name string) (raw []byte, n int, interrupted bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, 0, false, fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, 0, false, fmt.Errorf("netlink bind: %w", err)
	}
	const seq = 1
	req := appendDumpRequest(nil, l.family, unix.NFT_MSG_GETSETELEM, seq, unix.NFTA_SET_ELEM_LIST_TABLE, l.table, unix.NFTA_SET_ELEM_LIST_SET, name)
	if err := unix.Sendto(fd, req, 0, sa); err != nil {
		return nil, 0, false, fmt.Errorf("netlink element dump of %s: %w", name, err)
	}
	buf := elementBuffers.Get().(*[]byte)
	defer elementBuffers.Put(buf)
	for batch := 0; ; batch++ {
		if batch%256 == 0 && ctx.Err() != nil {
			return nil, 0, false, ctx.Err()
		}
		m, _, err := unix.Recvfrom(fd, *buf, 0)
		if err != nil {
			return nil, 0, false, fmt.Errorf("netlink element dump of %s: %w", name, err)
		}
		b := (*buf)[:m]
		for len(b) >= unix.NLMSG_HDRLEN {
			size := int(binary.NativeEndian.Uint32(b[0:]))
			if size < unix.NLMSG_HDRLEN || size > len(b) {
				return nil, 0, false, fmt.Errorf("netlink element dump of %s: malformed message", name)
			}
			typ := binary.NativeEndian.Uint16(b[4:])
			flags := binary.NativeEndian.Uint16(b[6:])
			mseq := binary.NativeEndian.Uint32(b[8:])
			data := b[unix.NLMSG_HDRLEN:size]
			b = b[min(len(b), (size+3)&^3):]
			if mseq != seq {
				continue
			}
			if flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch typ {
			case unix.NLMSG_DONE:
				return raw, n, interrupted, nil
			case unix.NLMSG_ERROR:
				if len(data) >= 4 {
					if e := unix.Errno(-int32(binary.NativeEndian.Uint32(data))); e != 0 {
						return nil, 0, false, fmt.Errorf("netlink element dump of %s: %w", name, e)
					}
				}
				return raw, n, interrupted, nil
			case unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM:
				if len(data) < 4 {
					continue
				}
				err := eachAttr(data[4:], func(typ uint16, v []byte) error {
					if typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
						return nil
					}
					raw = appendAttr(raw, typ, v)
					return eachAttr(v, func(uint16, []byte) error { n++; return nil })
				})
				if err != nil {
					return nil, 0, false, fmt.Errorf("netlink element dump of %s: %w", name, err)
				}
			}
		}
	}
}

// elementBuffers are the element dumps' receive buffers (the kernel fills
// a dump's batch up to the reader's buffer, at most 32 KiB).
var elementBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// eachElement calls fn with the attributes of every element (its
// NFTA_LIST_ELEM's payload) of raw, a sequence of NFTA_SET_ELEM_LIST_ELEMENTS.
func eachElement(raw []byte, fn func(el []byte) error) error {
	return eachAttr(raw, func(_ uint16, list []byte) error {
		return eachAttr(list, func(_ uint16, el []byte) error { return fn(el) })
	})
}

// parseElement reads one element's key, and its value: a verdict
// (NFTA_DATA_VERDICT) or data (NFTA_DATA_VALUE).
func parseElement(el []byte) (nftables.ListedElement, error) {
	var le nftables.ListedElement
	err := eachAttr(el, func(typ uint16, v []byte) error {
		switch typ {
		case unix.NFTA_SET_ELEM_KEY:
			return eachAttr(v, func(typ uint16, d []byte) error {
				if typ == unix.NFTA_DATA_VALUE {
					le.Key = d
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_DATA:
			return eachAttr(v, func(typ uint16, d []byte) error {
				switch typ {
				case unix.NFTA_DATA_VALUE:
					le.Data = d
				case unix.NFTA_DATA_VERDICT:
					le.HasVerdict = true
					return eachAttr(d, func(typ uint16, x []byte) error {
						switch {
						case typ == unix.NFTA_VERDICT_CODE && len(x) == 4:
							le.Verdict = int32(binary.BigEndian.Uint32(x))
						case typ == unix.NFTA_VERDICT_CHAIN:
							le.Chain = string(bytes.TrimRight(x, "\x00"))
						}
						return nil
					})
				}
				return nil
			})
		}
		return nil
	})
	return le, err
}

// eachAttr calls fn with the type (flags masked) and payload of every
// netlink attribute of b.
func eachAttr(b []byte, fn func(typ uint16, v []byte) error) error {
	for len(b) >= 4 {
		size := int(binary.NativeEndian.Uint16(b[0:]))
		if size < 4 || size > len(b) {
			return errors.New("malformed attribute")
		}
		if err := fn(binary.NativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[4:size]); err != nil {
			return err
		}
		b = b[min(len(b), (size+3)&^3):]
	}
	return nil
}

// appendAttr appends an attribute of type typ holding v (padded).
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ListChainNames returns the names of the table's chains from one kernel
// chain dump read with a 32 KiB buffer. The kernel fills each dump batch
// up to the reader's last buffer size (at most 32 KiB) and resumes every
// batch by walking the family's chains from the start; google/nftables
// (behind knftables' ListAll) reads with a page, so its dump has eight
// times as many batches and takes several times as long on a large
// table (the listed-s of BenchmarkKernelResync measures a listing
// resync; BENCHMARKS.md). A dump the kernel marks interrupted (the ruleset
// changed meanwhile) is read again, up to three times.
func (l *netlinkRuleLister) ListChainNames(ctx context.Context) ([]string, error) {
	var err error
	for try := 0; try < 3; try++ {
		var names []string
		var interrupted bool
		if names, interrupted, err = l.dumpChainNames(ctx); err == nil && !interrupted {
			return names, nil
		}
		if err == nil {
			err = errors.New("netlink chain dump interrupted three times")
		}
	}
	return nil, err
}

func (l *netlinkRuleLister) dumpChainNames(ctx context.Context) (names []string, interrupted bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, false, fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, false, fmt.Errorf("netlink bind: %w", err)
	}
	const seq = 1
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], uint16(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETCHAIN))
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	req[unix.NLMSG_HDRLEN] = l.family
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, false, fmt.Errorf("netlink chain dump: %w", err)
	}
	buf := make([]byte, 1<<20)
	for batch := 0; ; batch++ {
		if batch%256 == 0 && ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, false, fmt.Errorf("netlink chain dump: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, false, fmt.Errorf("netlink chain dump: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return names, interrupted, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return nil, false, fmt.Errorf("netlink chain dump: %w", unix.Errno(-e))
					}
				}
				continue
			}
			if m.Header.Type != unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWCHAIN || len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				return nil, false, err
			}
			var table, name string
			for ad.Next() {
				switch ad.Type() {
				case unix.NFTA_CHAIN_TABLE:
					table = ad.String()
				case unix.NFTA_CHAIN_NAME:
					name = ad.String()
				}
			}
			if err := ad.Err(); err != nil {
				return nil, false, err
			}
			if table == l.table {
				names = append(names, name)
			}
		}
	}
}
