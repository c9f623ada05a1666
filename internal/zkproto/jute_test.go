package zkproto

import (
	"errors"
	"strings"
	"testing"
)

func TestReaderErrors(t *testing.T) {
	cases := []struct {
		name      string
		in        []byte
		read      func(r *Reader)
		field     string
		offset    int
		reasonHas string
	}{
		{"int truncated", []byte{0, 0, 1}, func(r *Reader) { r.Int("a.i") }, "a.i", 0, "truncated"},
		{"long truncated after int", []byte{0, 0, 0, 1, 0, 0}, func(r *Reader) { r.Int("a.i"); r.Long("a.l") }, "a.l", 4, "truncated"},
		{"bool truncated", nil, func(r *Reader) { r.Bool("a.b") }, "a.b", 0, "truncated"},
		{"negative buffer length", []byte{0xff, 0xff, 0xff, 0xfe}, func(r *Reader) { r.Buffer("a.buf") }, "a.buf", 0, "negative"},
		{"buffer longer than packet", []byte{0, 0, 0, 5, 1, 2}, func(r *Reader) { r.Buffer("a.buf") }, "a.buf", 0, "exceeds"},
		{"huge string length", []byte{0x7f, 0xff, 0xff, 0xff}, func(r *Reader) { r.String("a.s") }, "a.s", 0, "exceeds"},
		{"vector count beyond packet", []byte{0, 0, 0, 2, 0, 0, 0, 0}, func(r *Reader) { r.Strings("a.v") }, "a.v", 0, "exceeds"},
		{"negative vector count", []byte{0x80, 0, 0, 0}, func(r *Reader) { r.Strings("a.v") }, "a.v", 0, "negative"},
		{"vector item truncated", []byte{0, 0, 0, 1, 0, 0, 0, 3, 'a'}, func(r *Reader) { r.Strings("a.v") }, "a.v", 4, "exceeds"},
		{"trailing bytes", []byte{0, 0, 0, 1, 9}, func(r *Reader) { r.Int("a.i"); r.End("A") }, "A", 4, "trailing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.in)
			tc.read(r)
			var de *DecodeError
			if !errors.As(r.Err(), &de) {
				t.Fatalf("err = %v, want a *DecodeError", r.Err())
			}
			if de.Field != tc.field || de.Offset != tc.offset || !strings.Contains(de.Reason, tc.reasonHas) {
				t.Fatalf("got %+v, want field %q offset %d reason containing %q", de, tc.field, tc.offset, tc.reasonHas)
			}
			if !strings.Contains(de.Error(), tc.field) {
				t.Fatalf("message %q does not name the field", de.Error())
			}
		})
	}
}

func TestReaderNulls(t *testing.T) {
	r := NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if b := r.Buffer("b"); b != nil {
		t.Fatalf("null buffer = %v, want nil", b)
	}
	if s := r.String("s"); s != "" {
		t.Fatalf("null string = %q, want empty", s)
	}
	if v := r.Strings("v"); v != nil {
		t.Fatalf("null vector = %v, want nil", v)
	}
	r.End("nulls")
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
}

func TestErrorSticks(t *testing.T) {
	r := NewReader([]byte{0})
	r.Int("first")
	r.Int("second")
	var de *DecodeError
	if !errors.As(r.Err(), &de) || de.Field != "first" {
		t.Fatalf("err = %v, want the first field's error", r.Err())
	}
}

func TestBufferDoesNotAlias(t *testing.T) {
	in := []byte{0, 0, 0, 1, 'x'}
	b := NewReader(in).Buffer("b")
	in[4] = 'y'
	if string(b) != "x" {
		t.Fatalf("buffer aliases its input: %q", b)
	}
}

func TestResetShares(t *testing.T) {
	in := []byte{0, 0, 0, 1, 'x', 0, 0, 0, 1, 'z'}
	var r Reader
	r.Reset(in, true)
	b := r.Buffer("b")
	in[4] = 'y'
	if string(b) != "y" {
		t.Fatalf("a sharing reader's buffer is a copy: %q", b)
	}
	if cap(b) != 1 {
		t.Fatalf("a shared buffer's capacity %d reaches past it into the input", cap(b))
	}
	r.Reset(in[5:], false)
	c := r.Buffer("c")
	in[9] = 'w'
	if string(c) != "z" {
		t.Fatalf("Reset without share aliases its input: %q", c)
	}
	var rec SetDataRequest
	r.Reset(Encode(&SetDataRequest{Path: "/a", Data: []byte("v"), Version: 3}), true)
	if err := r.Record(&rec, "setData"); err != nil || rec.Path != "/a" || string(rec.Data) != "v" || rec.Version != 3 {
		t.Fatalf("Record = %+v, %v", rec, err)
	}
	r.Reset(append(Encode(&SetDataRequest{Path: "/a"}), 0), true)
	if err := r.Record(&rec, "setData"); err == nil {
		t.Fatal("Record took a trailing byte")
	}
}
