package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// sysctls reads and writes integer kernel settings: a name relative to
// /proc/sys ("net/netfilter/nf_conntrack_max") or an absolute path under
// /sys (conntrackHashsize).
type sysctls interface {
	Get(name string) (int, error)
	Set(name string, value int) error
}

// conntrackHashsize is the conntrack hash table size, a module parameter.
const conntrackHashsize = "/sys/module/nf_conntrack/parameters/hashsize"

// procSysctls is /proc/sys under root ("" means "/proc/sys"); absolute
// names are paths.
type procSysctls struct{ root string }

func (s procSysctls) path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	root := s.root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, filepath.FromSlash(name))
}

func (s procSysctls) Get(name string) (int, error) {
	b, err := os.ReadFile(s.path(name))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (s procSysctls) Set(name string, value int) error {
	return os.WriteFile(s.path(name), []byte(strconv.Itoa(value)), 0o640)
}

// conntrackMax is kube-proxy's nf_conntrack_max for cfg on cpus CPUs:
// max(maxPerCore × cpus, min), or 0 ("leave it as is") when maxPerCore is
// 0 or unset.
func conntrackMax(cfg ConntrackConfig, cpus int) int {
	if cfg.MaxPerCore == nil || *cfg.MaxPerCore <= 0 {
		return 0
	}
	scaled := int(*cfg.MaxPerCore) * cpus
	if cfg.Min != nil && int(*cfg.Min) > scaled {
		return int(*cfg.Min)
	}
	return scaled
}

// applyConntrack sets the conntrack sysctls of the conntrack section as
// kube-proxy v1.34 does: nf_conntrack_max to conntrackMax (when that is
// not 0) and then, if that worked, the hash table size raised to a
// quarter of it when smaller;
// each timeout that is not 0; nf_conntrack_tcp_be_liberal to 1 when asked.
// A setting already at its value is not written. A setting that cannot be
// written (a read-only /proc/sys or /sys in a container, a network
// namespace where nf_conntrack_max belongs to the host) is logged as one
// warning line naming it and the value left; the others still apply, and
// the failures are returned joined.
func applyConntrack(cfg ConntrackConfig, sys sysctls, cpus int, log logr.Logger) error {
	var errs []error
	set := func(name string, value int, raiseOnly bool) bool {
		cur, err := sys.Get(name)
		if err == nil && (cur == value || raiseOnly && cur > value) {
			return true
		}
		if err := sys.Set(name, value); err != nil {
			errs = append(errs, fmt.Errorf("setting %s to %d: %w", name, value, err))
			log.Info("Warning: could not set a conntrack setting; leaving it as is", "name", name, "want", value, "current", cur, "err", err.Error())
			return false
		}
		log.Info("Set sysctl", "name", name, "value", value)
		return true
	}
	// The hash table size is global to the host; it is touched only when
	// nf_conntrack_max could be set (in the host's network namespace).
	if max := conntrackMax(cfg, cpus); max > 0 && set("net/netfilter/nf_conntrack_max", max, false) {
		// As v1.34: a hash table size that cannot be read is an error
		// and is not written.
		if _, err := sys.Get(conntrackHashsize); err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", conntrackHashsize, err))
			log.Info("Warning: could not read the conntrack hash table size; leaving it as is", "name", conntrackHashsize, "err", err.Error())
		} else {
			set(conntrackHashsize, max/4, true)
		}
	}
	seconds := func(d time.Duration) int { return int(d / time.Second) }
	if d := cfg.TCPEstablishedTimeout; d != nil && d.Duration > 0 {
		set("net/netfilter/nf_conntrack_tcp_timeout_established", seconds(d.Duration), false)
	}
	if d := cfg.TCPCloseWaitTimeout; d != nil && d.Duration > 0 {
		set("net/netfilter/nf_conntrack_tcp_timeout_close_wait", seconds(d.Duration), false)
	}
	if cfg.TCPBeLiberal {
		set("net/netfilter/nf_conntrack_tcp_be_liberal", 1, false)
	}
	if cfg.UDPTimeout.Duration > 0 {
		set("net/netfilter/nf_conntrack_udp_timeout", seconds(cfg.UDPTimeout.Duration), false)
	}
	if cfg.UDPStreamTimeout.Duration > 0 {
		set("net/netfilter/nf_conntrack_udp_timeout_stream", seconds(cfg.UDPStreamTimeout.Duration), false)
	}
	return errors.Join(errs...)
}

// numCPU is the CPU count used for conntrack.maxPerCore, as kube-proxy
// v1.34 counts it (detectNumCPU in cmd/kube-proxy/app/conntrack.go): the
// machine's online CPUs as /sys lists them (cadvisor's topology), which a
// CPU affinity or cpuset does not shrink (kubernetes#99225), else
// runtime.NumCPU(). v1.34 caps nothing: max(maxPerCore × CPUs, min).
func numCPU() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := countCPUList(strings.TrimSpace(string(b))); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
}

// countCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11"); 0
// when it does not parse.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
