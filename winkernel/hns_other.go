//go:build !windows

package winkernel

// NewHNS returns the real HNS, which exists only on Windows: here it
// returns ErrNotSupported. Use winkerneltest.FakeHNS on other systems.
func NewHNS() (HNS, error) { return nil, ErrNotSupported }
