//go:build !linux

package xtables

import (
	"errors"
	"os"
)

// inputFile is Linux only (memfd); elsewhere the tools get a pipe.
func inputFile([]byte) (*os.File, error) { return nil, errors.ErrUnsupported }
