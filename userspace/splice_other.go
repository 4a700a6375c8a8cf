//go:build !linux

package userspace

import "github.com/svcproxy/svcproxy/internal/tcprelay"

func newPipePool() *tcprelay.PipePool { return tcprelay.NewPipePool(nil) }
