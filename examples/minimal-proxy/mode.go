package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
)

// modeProbes answer whether the node can run a mode; nil means it can.
// They are functions so tests can pretend any kernel.
type modeProbes struct {
	// ipvs reports why the kernel cannot do IPVS, or nil.
	ipvs func() error
	// iptables reports why iptables is missing or too old, or nil.
	iptables func() error
	// nftables reports why nft is missing or too old, or nil (nil
	// function: probeNFTables).
	nftables func() error
}

// chooseMode turns the requested mode ("" is iptables, kube-proxy's Linux
// default) into the mode that will run, falling back as kube-proxy did:
// ipvs → iptables when the kernel has no IPVS, nftables → iptables when nft
// is missing or too old (or the kernel lacks nftables), iptables → userspace when
// iptables is missing or too old. Each fallback is logged with its reason.
func chooseMode(requested string, probes modeProbes, log logr.Logger) string {
	mode := requested
	if mode == "" {
		mode = modeIPTables
	}
	if mode == modeNFTables {
		probe := probes.nftables
		if probe == nil {
			probe = probeNFTables
		}
		if err := probe(); err != nil {
			log.Info("Can't use the nftables proxier, falling back to iptables", "reason", err.Error())
			mode = modeIPTables
		}
	}
	if mode == modeIPVS {
		if err := probes.ipvs(); err != nil {
			log.Info("Can't use the IPVS proxier, falling back to iptables", "reason", err.Error())
			mode = modeIPTables
		}
	}
	if mode == modeIPTables {
		if err := probes.iptables(); err != nil {
			log.Info("Can't use the iptables proxier, falling back to userspace", "reason", err.Error())
			mode = modeUserspace
		}
	}
	return mode
}

// minIPTablesVersion is the oldest iptables the iptables mode accepts:
// kube-proxy needs -C (check) and --wait, both in 1.4.11.
var minIPTablesVersion = [3]int{1, 4, 11}

// probeIPTables reports whether iptables and iptables-restore are on PATH
// and iptables is at least minIPTablesVersion.
func probeIPTables() error {
	for _, bin := range []string{"iptables", "iptables-restore", "iptables-save"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: %w", bin, err)
		}
	}
	out, err := exec.Command("iptables", "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables --version: %w: %s", err, bytes.TrimSpace(out))
	}
	v, err := parseIPTablesVersion(string(out))
	if err != nil {
		return err
	}
	for i := range v {
		if v[i] != minIPTablesVersion[i] {
			if v[i] < minIPTablesVersion[i] {
				return fmt.Errorf("iptables %d.%d.%d is older than %d.%d.%d", v[0], v[1], v[2], minIPTablesVersion[0], minIPTablesVersion[1], minIPTablesVersion[2])
			}
			break
		}
	}
	return nil
}

// parseIPTablesVersion reads "iptables v1.8.9 (nf_tables)" and the like.
func parseIPTablesVersion(out string) ([3]int, error) {
	var v [3]int
	for _, field := range strings.Fields(out) {
		s, ok := strings.CutPrefix(field, "v")
		if !ok {
			continue
		}
		parts := strings.Split(s, ".")
		if len(parts) < 2 || len(parts) > 3 {
			continue
		}
		okAll := true
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				okAll = false
				break
			}
			v[i] = n
		}
		if okAll {
			return v, nil
		}
	}
	return v, fmt.Errorf("cannot read a version from iptables --version output %q", strings.TrimSpace(out))
}

// probeIPVS returns the IPVS probe for the configured scheduler: the
// kernel must answer IPVS and ipset netlink requests and have the
// scheduler (ipvskernel.Probe).
func probeIPVS(scheduler string) func() error {
	return func() error { return ipvskernel.Probe(ipvskernel.ProbeOptions{}).Usable(scheduler) }
}
