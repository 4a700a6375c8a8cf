package xtblob

import (
	"encoding/binary"
	"iter"
)

// RawForTest is table as the kernel returns it (its info, then its
// entries byte for byte), for the external tests.
func RawForTest(fam Family, name string) ([]byte, error) {
	k, err := openKernel(fam)
	if err != nil {
		return nil, err
	}
	defer k.close()
	tb, err := k.readTable(name)
	if err != nil {
		return nil, err
	}
	defer freeBig(tb.mem)
	var out []byte
	out = binary.NativeEndian.AppendUint32(out, tb.info.validHooks)
	for h := 0; h < numHooks; h++ {
		out = binary.NativeEndian.AppendUint32(out, tb.info.hookEntry[h])
		out = binary.NativeEndian.AppendUint32(out, tb.info.underflow[h])
	}
	out = binary.NativeEndian.AppendUint32(out, tb.info.numEntries)
	out = binary.NativeEndian.AppendUint32(out, tb.info.size)
	return append(out, tb.srcs[0]...), nil
}

// PlanForTest runs what Restore does in user space (parse, encode, apply
// to empty tables, lay out and write the blobs) and returns the blobs'
// total size. workers is RestoreOptions.Workers, lines
// RestoreOptions.Lines.
func PlanForTest(fam Family, data []byte, lines iter.Seq[Line], workers int) (int, error) {
	opts := RestoreOptions{Lines: lines}
	p := opts.parse(fam, data)
	p.encode(workers, nil)
	defer p.free()
	tables := map[string]*table{}
	err := p.apply(tables, func(name string) (*table, error) { return emptyTable(fam, name), nil }, "")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, t := range tables {
		order := t.chainOrder()
		size, _ := t.layoutChains(order)
		blob := allocFilled(int(size))
		t.marshal(order, blob)
		total += len(blob)
		freeBig(blob)
	}
	return total, nil
}

// ParseTableForTest applies data to empty tables, lays table out, and
// returns a function that parses that blob as Restore parses a table it
// reads from the kernel (for a benchmark of the read side).
func ParseTableForTest(fam Family, data []byte, name string) (func() error, error) {
	p := parseInput(fam, data)
	p.encode(0, nil)
	defer p.free()
	tables := map[string]*table{}
	if err := p.apply(tables, func(n string) (*table, error) { return emptyTable(fam, n), nil }, ""); err != nil {
		return nil, err
	}
	blob, inf := blobOf(tables[name])
	return func() error {
		_, err := parseTable(fam, name, inf, blob)
		return err
	}, nil
}
