//go:build !linux

package userspace

import (
	"io"
	"net"
)

// pipePool is Linux's (splice); nothing to keep here.
type pipePool struct{}

func (*pipePool) init()      {}
func (*pipePool) closeIdle() {}

// copyStream copies src to dst until src's EOF (nil error) or an error.
func copyStream(_ *pipePool, dst, src net.Conn) (int64, error) { return io.Copy(dst, src) }
