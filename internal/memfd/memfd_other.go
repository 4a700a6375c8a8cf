//go:build !linux

package memfd

import (
	"errors"
	"os"
)

// File is Linux only (memfd_create); elsewhere it returns
// errors.ErrUnsupported and the caller feeds the child another way.
func File(string, []byte) (*os.File, error) { return nil, errors.ErrUnsupported }
