package xtables

import (
	"bytes"
	"context"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// SetWriteTables replaces the in-process restore of a Runner from New.
func SetWriteTables(r Runner, f func(xtblob.Family, []byte, xtblob.RestoreOptions) error) {
	r.(*execRunner).writeTables = f
}

// SetListTable replaces the listing the self-check reads back.
func SetListTable(r Runner, f func(ctx context.Context, table Table, buf *bytes.Buffer) error) {
	r.(*execRunner).listTable = f
}
