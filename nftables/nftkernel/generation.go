//go:build linux

package nftkernel

import (
	"github.com/svcproxy/svcproxy/internal/nfgen"
	"github.com/svcproxy/svcproxy/nftables"
)

// NewGenerationReader returns the nftables.GenerationReader of the calling
// thread's network namespace at each call (one netlink request, tens of
// microseconds).
func NewGenerationReader() nftables.GenerationReader { return netlinkGeneration{} }

type netlinkGeneration struct{}

func (netlinkGeneration) Generation() (uint32, error) { return nfgen.Generation() }
