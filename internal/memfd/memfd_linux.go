package memfd

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// File returns a memory file named name holding data, positioned at its
// start (close-on-exec; a child gets it as its standard input through
// exec.Cmd.Stdin). The caller closes it.
func File(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
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
