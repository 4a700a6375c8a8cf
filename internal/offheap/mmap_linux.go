package offheap

import "golang.org/x/sys/unix"

const mmapSupported = true

// mapBuffer maps size bytes of private anonymous memory (zeroed; pages
// become resident when first written).
func mapBuffer(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}

func unmap(b []byte) { _ = unix.Munmap(b) }

// release gives b's pages back to the kernel; b stays mapped and reads
// as zeros until written.
func release(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }
