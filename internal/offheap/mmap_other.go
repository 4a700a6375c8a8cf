//go:build !linux

package offheap

import "errors"

const mmapSupported = false

func mapBuffer(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmap([]byte) {}

func release([]byte) error { return errors.ErrUnsupported }
