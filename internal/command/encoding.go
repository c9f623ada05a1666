package command

import (
	"encoding/binary"
	"fmt"
)

// uvarintLen returns the length of v's minimal varint encoding.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func optionalUvarintLen(v uint64) int {
	if v == 0 {
		return 0
	}
	return uvarintLen(v)
}

func optionalBytesLen(n int) int {
	if n == 0 {
		return 0
	}
	return uvarintLen(uint64(n)) + n
}

func appendOptionalUvarint(dst []byte, v uint64) []byte {
	if v == 0 {
		return dst
	}
	return binary.AppendUvarint(dst, v)
}

func appendOptionalString(dst []byte, s string) []byte {
	if s == "" {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decoder reads canonical fields from data, remembering the first error.
type decoder struct {
	data   []byte
	offset int
	err    error
	ops    []TxnOp // room for a transaction's operations (UnmarshalReusing)
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: offset %d: %s", ErrMalformed, d.offset, fmt.Sprintf(format, args...))
	}
}

// uvarint reads a minimally encoded unsigned varint.
func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.offset:])
	switch {
	case n == 0:
		d.fail("%s truncated", what)
		return 0
	case n < 0:
		d.fail("%s overflows 64 bits", what)
		return 0
	case n != uvarintLen(v):
		d.fail("%s is not minimally encoded", what)
		return 0
	}
	d.offset += n
	return v
}

func (d *decoder) optionalUvarint(mask, bit uint64, what string) uint64 {
	if mask&bit == 0 {
		return 0
	}
	v := d.uvarint(what)
	if d.err == nil && v == 0 {
		d.fail("%s present but zero", what)
	}
	return v
}

// optionalBytes returns a sub-slice of data (no copy).
func (d *decoder) optionalBytes(mask, bit uint64, what string) []byte {
	if mask&bit == 0 {
		return nil
	}
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n == 0 {
		d.fail("%s present but empty", what)
		return nil
	}
	if n > uint64(len(d.data)-d.offset) {
		d.fail("%s length %d exceeds the %d remaining bytes", what, n, len(d.data)-d.offset)
		return nil
	}
	b := d.data[d.offset : d.offset+int(n) : d.offset+int(n)]
	d.offset += int(n)
	return b
}

func (d *decoder) optionalString(mask, bit uint64, what string) string {
	return string(d.optionalBytes(mask, bit, what))
}

func (d *decoder) uvarintList(what string) []uint64 {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n == 0 {
		d.fail("%s present but empty", what)
		return nil
	}
	// Every element takes at least one byte.
	if n > uint64(len(d.data)-d.offset) {
		d.fail("%s count %d exceeds the %d remaining bytes", what, n, len(d.data)-d.offset)
		return nil
	}
	list := make([]uint64, n)
	for i := range list {
		list[i] = d.uvarint(what)
	}
	return list
}
