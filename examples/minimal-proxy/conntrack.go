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

// sysctls reads and writes integer sysctls by their /proc/sys path
// ("net/netfilter/nf_conntrack_max").
type sysctls interface {
	Get(name string) (int, error)
	Set(name string, value int) error
}

// procSysctls is /proc/sys under root ("" means "/proc/sys").
type procSysctls struct{ root string }

func (s procSysctls) path(name string) string {
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

// applyConntrack sets the conntrack sysctls of the conntrack section as
// kube-proxy does: nf_conntrack_max raised (never lowered) to
// max(maxPerCore × CPUs, min) unless maxPerCore is 0, and each timeout,
// and tcp_be_liberal, set when configured. The hash table size
// (/sys/module/nf_conntrack/parameters/hashsize) is left alone. Failures
// (a read-only /proc/sys in a container, a network namespace where
// nf_conntrack_max belongs to the host) are logged and returned joined;
// the proxy keeps running.
func applyConntrack(cfg ConntrackConfig, sys sysctls, cpus int, log logr.Logger) error {
	var errs []error
	set := func(name string, value int) {
		if err := sys.Set(name, value); err != nil {
			errs = append(errs, fmt.Errorf("setting %s to %d: %w", name, value, err))
			return
		}
		log.V(1).Info("Set sysctl", "name", name, "value", value)
	}
	if cfg.MaxPerCore != nil && *cfg.MaxPerCore > 0 {
		want := int(*cfg.MaxPerCore) * cpus
		if cfg.Min != nil && int(*cfg.Min) > want {
			want = int(*cfg.Min)
		}
		const name = "net/netfilter/nf_conntrack_max"
		cur, err := sys.Get(name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("reading %s: %w", name, err))
		case cur < want:
			set(name, want)
		}
	}
	seconds := func(d time.Duration) int { return int(d / time.Second) }
	if d := cfg.TCPEstablishedTimeout; d != nil && d.Duration > 0 {
		set("net/netfilter/nf_conntrack_tcp_timeout_established", seconds(d.Duration))
	}
	if d := cfg.TCPCloseWaitTimeout; d != nil && d.Duration > 0 {
		set("net/netfilter/nf_conntrack_tcp_timeout_close_wait", seconds(d.Duration))
	}
	if cfg.TCPBeLiberal {
		set("net/netfilter/nf_conntrack_tcp_be_liberal", 1)
	}
	if cfg.UDPTimeout.Duration > 0 {
		set("net/netfilter/nf_conntrack_udp_timeout", seconds(cfg.UDPTimeout.Duration))
	}
	if cfg.UDPStreamTimeout.Duration > 0 {
		set("net/netfilter/nf_conntrack_udp_timeout_stream", seconds(cfg.UDPStreamTimeout.Duration))
	}
	err := errors.Join(errs...)
	if err != nil {
		log.Error(err, "Could not apply the conntrack settings; continuing with the node's")
	}
	return err
}

// numCPU is the CPU count used for conntrack.maxPerCore.
func numCPU() int { return runtime.NumCPU() }
