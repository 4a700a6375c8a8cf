//go:build linux

package nftables

import (
	"context"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The interfaces below are what the engine drives besides
// knftables.Interface: its kernel driver (package nftkernel implements
// them over netlink; nftablestest fakes the generation reader). Every
// method is required and nothing is asked of a driver by type assertion,
// so a wrapper that embeds an interface, or forwards every method with
// its arguments as it got them, leaves the engine as it was.

// ChainCommentLister is what the engine reads of the table over netlink,
// faster than knftables (whose ListRules, ListAll and ListElements parse
// nft's JSON listing: a full sync's listing, BenchmarkKernelResync's
// listed-s): whether the table exists, the comment of the first rule of
// each chain (where the engine keeps the chain's content hash), the chain
// names, the elements of the engine's sets and maps as the kernel holds
// them, and the rules' comments of a few chains (the self-check's
// read-back and the drift check). Every method is required: a wrapper
// forwards all of them (or embeds the interface) and the engine reads the
// table the same way through it.
type ChainCommentLister interface {
	// TableExists reports whether the kube-proxy table exists.
	TableExists(ctx context.Context) (bool, error)
	// ChainHeads returns, for each of the named chains that has rules,
	// its first rule's comment and its number of rules.
	ChainHeads(ctx context.Context, chains []string) (map[string]ChainHead, error)
	// ListChainNames returns the names of the table's chains.
	ListChainNames(ctx context.Context) ([]string, error)
	// ListElements calls start with the number of elements of the named
	// set or map, once read, then fn with each element as the kernel
	// lists it; an error of fn ends the listing and is returned as it
	// is. The engine decodes the elements itself (the key layouts are
	// its own), with no text between the kernel's bytes and its state,
	// into a map sized by start.
	ListElements(ctx context.Context, name string, start func(n int), fn func(ListedElement) error) error
	// RuleComments returns the comments of the rules of each of the
	// named chains that exists, in order (nil: a rule without one); a
	// chain with no rules maps to an empty slice, a missing chain to
	// nothing. The self-check reads its sample of the chains a netlink
	// batch wrote with it, and the drift check the services chain.
	RuleComments(ctx context.Context, chains []string) (map[string][]*string, error)
}

// ChainHead is what a full sync reads of a chain: the first rule's comment
// (nil: none), where the engine keeps the chain's content hash, and the
// number of rules, which shows a rule added or deleted by hand below it.
type ChainHead struct {
	Comment *string
	Rules   int
}

// ListedElement is an element of a set or map as the kernel lists it
// (NFT_MSG_NEWSETELEM).
type ListedElement struct {
	// Key is the key's data (NFTA_SET_ELEM_KEY's NFTA_DATA_VALUE): the
	// key's fields concatenated, each padded to a multiple of 4 bytes.
	// The engine keeps nothing of it once ListElements' fn returned.
	Key []byte
	// HasVerdict is true for an element of a verdict map: Verdict is its
	// value's code (NFTA_VERDICT_CODE: unix.NFT_GOTO, NF_ACCEPT …) and
	// Chain the chain of a goto or jump (NFTA_VERDICT_CHAIN). false: an
	// element of a set.
	HasVerdict bool
	Verdict    int32
	Chain      string
	// Data is a data map's value (NFTA_SET_ELEM_DATA's NFTA_DATA_VALUE,
	// the fields concatenated as in Key), nil for a set's element and a
	// verdict map's. The engine keeps nothing of it once fn returned.
	Data []byte
}

// GenerationReader reads the kernel's nftables ruleset generation id
// (NFT_MSG_GETGEN): it moves by one on every committed nftables
// transaction in the network namespace, of any table and family
// (iptables-nft's included). nftkernel.NewGenerationReader is the real
// one; nftablestest.Fake models it.
type GenerationReader interface {
	Generation() (uint32, error)
}

// NetlinkWriter sends one nftables transaction as a netlink batch, in the
// network namespace of the calling thread. The kernel applies a batch
// atomically: all of it or, on any error, none.
type NetlinkWriter interface {
	// WriteBatch sends msgs (nftables messages, without sequence numbers)
	// between a batch begin and end and returns the kernel's verdict: nil
	// once the batch is committed, else an error (a *BatchError when the
	// kernel refused it). Once it returned, whatever it returned, the
	// engine reuses the memory of msgs' Data (arenas outside the Go heap,
	// see the package doc): a writer keeps nothing of them, and copies
	// what it must keep. The batch to send, byte for byte, is
	// WireBatch(ctx, msgs).
	WriteBatch(ctx context.Context, msgs []netlink.Message) error
}

// BatchError is a batch the kernel refused: Errno for message Index of the
// batch (-1: the batch as a whole, e.g. when the commit failed).
type BatchError struct {
	Index int
	Type  uint16 // the message's nftables type (NFT_MSG_…)
	Errno unix.Errno
}

func (e *BatchError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("netlink batch refused: %v", e.Errno)
	}
	return fmt.Sprintf("netlink batch refused at message %d (type %d): %v", e.Index, e.Type, e.Errno)
}

// Unwrap lets errors.Is(err, unix.ENOENT) and the like see the errno.
func (e *BatchError) Unwrap() error { return e.Errno }
