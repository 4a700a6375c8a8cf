package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// capNetAdmin is CAP_NET_ADMIN's bit in a capability set.
const capNetAdmin = 12

// errNoNetAdmin: the process cannot program the node.
var errNoNetAdmin = errors.New("this process lacks CAP_NET_ADMIN, so it cannot program iptables, IPVS or conntrack: run it as root or grant it CAP_NET_ADMIN (a dry run, --dry-run, needs neither)")

// privilegeChecks are what checkPrivileges reads; a nil field reads the
// real process (tests inject their own).
type privilegeChecks struct {
	// effectiveCaps returns the effective capability set (CapEff).
	effectiveCaps func() (uint64, error)
	goos          string
}

// checkPrivileges reports, before anything starts, why this process
// cannot program the node, or nil. On Linux that is CAP_NET_ADMIN in the
// effective set (root has it unless it was dropped).
func checkPrivileges(c privilegeChecks) error {
	if c.goos == "" {
		c.goos = runtime.GOOS
	}
	if c.goos != "linux" {
		return nil
	}
	if c.effectiveCaps == nil {
		c.effectiveCaps = readEffectiveCaps
	}
	caps, err := c.effectiveCaps()
	if err != nil {
		return fmt.Errorf("cannot tell whether this process may program the node: %w", err)
	}
	if caps&(1<<capNetAdmin) == 0 {
		return errNoNetAdmin
	}
	return nil
}

// readEffectiveCaps reads CapEff from /proc/self/status.
func readEffectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}
