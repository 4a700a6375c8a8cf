//go:build !linux

package xtblob

// Restore needs Linux's x_tables; elsewhere it is ErrUnsupported.
func Restore(fam Family, data []byte, opts RestoreOptions) error {
	return unsupportedf("x_tables are Linux's")
}

func allocBig(n int) []byte    { return make([]byte, n) }
func allocFilled(n int) []byte { return make([]byte, n) }
func freeBig(b []byte)         {}

// ChainNames needs Linux's x_tables; elsewhere it is ErrUnsupported.
func ChainNames(fam Family, name string) ([]string, bool, error) {
	return nil, false, unsupportedf("x_tables are Linux's")
}
