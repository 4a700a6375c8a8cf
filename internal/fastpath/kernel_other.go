//go:build !linux

package fastpath

// KernelVersion is zero off Linux (no fast writer runs there).
func KernelVersion() Version { return Version{} }
