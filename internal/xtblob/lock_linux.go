//go:build linux

package xtblob

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockPollInterval is how often a held xtables lock is tried again.
const lockPollInterval = 10 * time.Millisecond

// lockPath is the xtables lock iptables 1.8.9 takes: $XTABLES_LOCKFILE,
// else /run/xtables.lock.
func lockPath(opts *RestoreOptions) string {
	if opts.LockFile != "" {
		return opts.LockFile
	}
	if p := os.Getenv("XTABLES_LOCKFILE"); p != "" {
		return p
	}
	return "/run/xtables.lock"
}

// lockXtables takes the xtables lock (flock, exclusive, on a file created
// if missing, as iptables does), trying for at most opts.LockWait; the
// returned function releases it.
func lockXtables(opts *RestoreOptions) (unlock func(), err error) {
	path := lockPath(opts)
	wait := opts.LockWait
	if wait == 0 {
		wait = DefaultLockWait
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("xtblob: xtables lock %s: %w", path, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			unix.Close(fd)
			return nil, fmt.Errorf("xtblob: xtables lock %s: %w", path, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			unix.Close(fd)
			return nil, fmt.Errorf("%w: %s still held after %s", ErrLockHeld, path, max(wait, 0))
		}
		time.Sleep(min(left, lockPollInterval))
	}
}
