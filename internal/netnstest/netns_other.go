//go:build !linux

package netnstest

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("netnstest: network namespaces need Linux (GOOS=" + runtime.GOOS + ")")

func newNamespace(role string) (*Namespace, error) { return nil, errUnsupported }

func (n *Namespace) close() error { return nil }

// Exec runs f inside ns; on this OS there are no network namespaces and it
// returns an error without calling f.
func Exec(ns *Namespace, f func() error) error { return errUnsupported }

func writeSysctl(ns *Namespace, path, value string) error { return errUnsupported }

func removeStale() {}

// Current reports whether the calling thread is in ns; never on this OS.
func (n *Namespace) Current() bool { return false }
