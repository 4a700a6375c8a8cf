package ipvskernel

import (
	"fmt"

	"github.com/svcproxy/svcproxy/ipvs"
)

// ProbeOptions say where Probe looks. The zero value is the real system.
type ProbeOptions struct {
	// SysRoot and ModulesRoot default to /sys and /lib/modules/$(uname -r).
	SysRoot     string
	ModulesRoot string
}

// ProbeResult says whether this kernel can run the IPVS proxier.
type ProbeResult struct {
	// Available: the IPVS generic netlink family answered GET_INFO.
	Available bool
	// Version is the kernel's IPVS version ("1.2.1").
	Version string
	// ConnTableSize is the IPVS connection hash table size.
	ConnTableSize int
	// Schedulers are those loaded, built in, or shipped as a module (the
	// kernel loads a scheduler's module when a service first uses it).
	Schedulers []string
	// IPSet: the ipset netlink subsystem answered.
	IPSet bool
	// Reason explains Available == false (or a missing ipset).
	Reason error
}

// Usable reports whether the proxier can run with the given scheduler
// ("" means DefaultScheduler).
func (r ProbeResult) Usable(scheduler string) error {
	if !r.Available {
		return fmt.Errorf("ipvs: kernel IPVS not available: %w", r.Reason)
	}
	if !r.IPSet {
		return fmt.Errorf("ipvs: kernel ipset not available: %w", r.Reason)
	}
	if scheduler == "" {
		scheduler = ipvs.DefaultScheduler
	}
	for _, s := range r.Schedulers {
		if s == scheduler {
			return nil
		}
	}
	return fmt.Errorf("ipvs: scheduler %q is neither loaded nor shipped as a module (have %v): %w", scheduler, r.Schedulers, ipvs.ErrNotSupported)
}
