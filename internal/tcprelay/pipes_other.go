//go:build !linux

package tcprelay

import (
	"io"
	"net"
)

// IdlePipes is Linux's bound (no pipes are kept here).
const IdlePipes = 16

// PipePool is Linux's (splice); nothing to keep here.
type PipePool struct{}

// NewPipePool returns the pool (pipe2 is not used here).
func NewPipePool(pipe2 func(p []int, flags int) error) *PipePool { return &PipePool{} }

// CloseIdle does nothing here.
func (*PipePool) CloseIdle() {}

// CopyStream copies src to dst until src's EOF (nil error) or an error.
func CopyStream(_ *PipePool, dst, src net.Conn) (int64, error) { return io.Copy(dst, src) }
