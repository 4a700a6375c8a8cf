package userspace

import (
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
)

// Proxied TCP is copied by internal/tcprelay (spliced, a pipe held only
// while a burst is in flight); the pool's pipes are made by pipe2, which
// tests make fail.

var pipe2 = unix.Pipe2

// idlePipes bounds the empty pipes kept for the next burst.
const idlePipes = tcprelay.IdlePipes

func newPipePool() *tcprelay.PipePool {
	return tcprelay.NewPipePool(func(p []int, flags int) error { return pipe2(p, flags) })
}
