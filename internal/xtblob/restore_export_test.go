package xtblob

import "encoding/binary"

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
