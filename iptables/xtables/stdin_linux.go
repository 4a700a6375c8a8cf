package xtables

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// inputFile returns a memory file (memfd) holding data, positioned at its
// start, for a tool's standard input; the caller closes it.
func inputFile(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("svcproxy-restore-input", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "svcproxy-restore-input")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
