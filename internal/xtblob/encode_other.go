//go:build !linux

package xtblob

// KernelSetIndex returns a function for Encoder.SetIndex; ipsets are
// Linux's, so elsewhere it knows no set (every -m set rule is then
// ErrUnsupported).
func KernelSetIndex(fam Family) func(name []byte) (index uint16, ok bool) {
	return func([]byte) (uint16, bool) { return 0, false }
}

// CheckKernelRevisions: x_tables is Linux's; elsewhere it is
// ErrUnsupported.
func CheckKernelRevisions(fam Family) error {
	return unsupported("x_tables needs Linux")
}
