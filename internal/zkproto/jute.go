package zkproto

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DecodeError is the error of every failed decode: which field, at which
// byte offset of the record, and why.
type DecodeError struct {
	// Field is the field being decoded, e.g. "ConnectRequest.passwd".
	Field string
	// Offset is the byte offset within the record where the field starts.
	Offset int
	// Reason says what was wrong with it.
	Reason string
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("zkproto: %s at offset %d: %s", e.Field, e.Offset, e.Reason)
}

// Reader decodes jute primitives from one record's bytes. The first error
// sticks: later reads return zero values, and Err reports the first error.
type Reader struct {
	buf   []byte
	off   int
	err   error
	share bool // Buffer returns slices of buf (Reset)
}

// NewReader returns a Reader over buf (one record, without its frame length).
func NewReader(buf []byte) *Reader { return &Reader{buf: buf} }

// Reset makes r read buf from its start, as NewReader(buf) would, without
// making another Reader. With share, the buffers read from r alias buf
// instead of being copies: only for a buf that nothing changes while what
// is decoded from it lives.
func (r *Reader) Reset(buf []byte, share bool) {
	*r = Reader{buf: buf, share: share}
}

// Record decodes rec from r, which must hold exactly rec from where it is.
func (r *Reader) Record(rec Record, name string) error {
	rec.Decode(r)
	r.End(name)
	return r.Err()
}

// Err is the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Offset is the number of bytes consumed so far.
func (r *Reader) Offset() int { return r.off }

// Remaining is the number of bytes not yet consumed.
func (r *Reader) Remaining() int { return len(r.buf) - r.off }

func (r *Reader) fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = &DecodeError{Field: field, Offset: r.off, Reason: fmt.Sprintf(format, args...)}
	}
}

// take returns the next n bytes, or nil and records an error.
func (r *Reader) take(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.Remaining() {
		r.fail(field, "truncated: need %d bytes, %d remain", n, r.Remaining())
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

// Int reads a jute int: 4 bytes, big-endian, signed.
func (r *Reader) Int(field string) int32 {
	b := r.take(field, 4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

// Long reads a jute long: 8 bytes, big-endian, signed.
func (r *Reader) Long(field string) int64 {
	b := r.take(field, 8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Bool reads a jute boolean: one byte, any non-zero value is true (as Java's
// DataInput.readBoolean reads it).
func (r *Reader) Bool(field string) bool {
	b := r.take(field, 1)
	if b == nil {
		return false
	}
	return b[0] != 0
}

// length reads an int length prefix and checks it against the bytes that
// remain, each element taking at least minSize bytes. It returns -1 for a
// null (length -1).
func (r *Reader) length(field string, minSize int) int {
	start := r.off
	n := r.Int(field)
	if r.err != nil {
		return 0
	}
	switch {
	case n == -1:
		return -1
	case n < 0:
		r.off = start
		r.fail(field, "negative length %d", n)
		return 0
	case int64(n)*int64(minSize) > int64(r.Remaining()):
		r.off = start
		r.fail(field, "length %d exceeds the %d bytes that remain", n, r.Remaining())
		return 0
	}
	return int(n)
}

// Buffer reads a jute buffer: an int length then that many bytes; length -1
// is null and returns nil. A non-null buffer is returned as a non-nil slice
// (possibly empty): a fresh one, never aliasing the input, unless the
// Reader was Reset to share its input.
func (r *Reader) Buffer(field string) []byte {
	n := r.length(field, 1)
	if r.err != nil || n < 0 {
		return nil
	}
	b := r.take(field, n)
	if b == nil {
		return nil
	}
	if r.share {
		return b[:n:n]
	}
	return append(make([]byte, 0, n), b...)
}

// String reads a jute ustring: encoded as a buffer, UTF-8. A null string
// reads as "". Invalid UTF-8 is passed through; callers that need a valid
// path check it themselves.
func (r *Reader) String(field string) string {
	n := r.length(field, 1)
	if r.err != nil || n < 0 {
		return ""
	}
	return string(r.take(field, n))
}

// VectorLen reads a jute vector's count; each element takes at least
// minSize bytes, which bounds the count by the bytes that remain. It returns
// -1 for a null vector.
func (r *Reader) VectorLen(field string, minSize int) int {
	if minSize < 1 {
		minSize = 1
	}
	return r.length(field, minSize)
}

// Strings reads a vector<ustring>; a null vector reads as nil.
func (r *Reader) Strings(field string) []string {
	n := r.VectorLen(field, 4)
	if r.err != nil || n < 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.String(field))
	}
	return out
}

// End records an error if bytes remain after the record.
func (r *Reader) End(record string) {
	if r.err == nil && r.Remaining() > 0 {
		r.fail(record, "%d trailing bytes", r.Remaining())
	}
}

// Writer encodes jute primitives by appending to a byte slice.
type Writer struct {
	buf []byte
}

// NewWriter returns a Writer appending to buf (which may be nil).
func NewWriter(buf []byte) *Writer { return &Writer{buf: buf} }

// Reset makes w append to buf, dropping what it held: a Writer kept by its
// owner encodes record after record into one buffer.
func (w *Writer) Reset(buf []byte) { w.buf = buf }

// Bytes is the encoded record so far.
func (w *Writer) Bytes() []byte { return w.buf }

// Int appends a jute int.
func (w *Writer) Int(v int32) { w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(v)) }

// Long appends a jute long.
func (w *Writer) Long(v int64) { w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v)) }

// Bool appends a jute boolean (1 or 0).
func (w *Writer) Bool(v bool) {
	if v {
		w.buf = append(w.buf, 1)
	} else {
		w.buf = append(w.buf, 0)
	}
}

// Buffer appends a jute buffer; nil is written as null (-1).
func (w *Writer) Buffer(b []byte) {
	if b == nil {
		w.Int(-1)
		return
	}
	w.Int(int32(clampLen(len(b))))
	w.buf = append(w.buf, b...)
}

// String appends a jute ustring (never null).
func (w *Writer) String(s string) {
	w.Int(int32(clampLen(len(s))))
	w.buf = append(w.buf, s...)
}

// VectorLen appends a vector count; a nil vector is written as null (-1).
func (w *Writer) VectorLen(n int, isNil bool) {
	if isNil {
		w.Int(-1)
		return
	}
	w.Int(int32(clampLen(n)))
}

// Strings appends a vector<ustring>; nil is written as null (-1).
func (w *Writer) Strings(ss []string) {
	w.VectorLen(len(ss), ss == nil)
	for _, s := range ss {
		w.String(s)
	}
}

// clampLen keeps a length within int32; anything that large can never fit
// in a frame, which the frame writer refuses.
func clampLen(n int) int {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return n
}
