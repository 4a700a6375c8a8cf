package xtblob

import (
	"os"

	"golang.org/x/sys/unix"
)

func flockForTest(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX) }
