//go:build !linux

package xtblob

// Verify needs Linux's x_tables; elsewhere it is ErrUnsupported.
func Verify(fam Family, input []byte, listings map[string][]byte, opts RestoreOptions) error {
	return unsupportedf("x_tables are Linux's")
}
