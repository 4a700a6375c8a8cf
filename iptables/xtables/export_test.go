package xtables

import "github.com/svcproxy/svcproxy/internal/xtblob"

// SetWriteTables replaces the in-process restore of a Runner from New.
func SetWriteTables(r Runner, f func(xtblob.Family, []byte, xtblob.RestoreOptions) error) {
	r.(*execRunner).writeTables = f
}
