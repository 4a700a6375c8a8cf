// Package offheap hands out fixed-size byte buffers from memory mapped
// outside the Go heap, for bytes that are built, sent and dropped within
// one operation (the nftables engine's netlink batches: tens of MiB at a
// large cold start, a few KiB in a partial sync).
//
// Why: the Go collector lets the heap grow to twice what it found live
// at its last cycle (GOGC=100), so every live byte of a pooled buffer
// costs about two bytes of peak heap and of resident memory, and a
// sync.Pool gives its buffers back only after two more cycles. Buffers
// mapped with mmap(2) count once, and Trim gives their pages back to the
// kernel (madvise MADV_DONTNEED) as soon as the operation ended.
//
// Guarantees:
//   - A buffer from Get is valid until the Pool is unreachable: it is
//     never unmapped while the Pool can still be used (a Put buffer is
//     reused, a trimmed one reads as zeros until written again), and the
//     mappings are released by a cleanup (runtime.AddCleanup) once the
//     Pool is garbage. Code that keeps a slice of a buffer after Put reads
//     reused bytes, as with any pool.
//   - Buffers hold bytes only: the collector does not scan them, so they
//     must never hold Go pointers.
//   - Where mmap is not available (not Linux, or it failed) or the Pool
//     was made with heap set, buffers come from the Go heap, with the same
//     API; Stats says which.
//   - Safe for concurrent use.
package offheap
