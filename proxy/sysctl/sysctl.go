// Package sysctl reads and writes the integer kernel settings under
// /proc/sys that the engines keep (route_localnet for localhost node
// ports, IPVS's conntrack and expire_* settings, ARP settings). Names are
// relative to /proc/sys ("net/ipv4/conf/all/route_localnet"). Network
// settings belong to a network namespace: Get and Set act on the
// namespace of the calling thread. proxytest.Sysctl is the in-memory fake.
package sysctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Interface reads and writes integer settings named relative to /proc/sys.
type Interface interface {
	Get(name string) (int, error)
	Set(name string, value int) error
}

// New returns /proc/sys. On a system without it every call fails with an
// error wrapping fs.ErrNotExist.
func New() Interface { return proc{root: "/proc/sys"} }

type proc struct{ root string }

func (s proc) Get(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.root, name))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	return v, nil
}

func (s proc) Set(name string, value int) error {
	if err := os.WriteFile(filepath.Join(s.root, name), []byte(strconv.Itoa(value)), 0o644); err != nil {
		return fmt.Errorf("sysctl %s: %w", name, err)
	}
	return nil
}
