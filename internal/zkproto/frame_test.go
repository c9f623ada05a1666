package zkproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 100, MaxPacket} {
		rec := bytes.Repeat([]byte{0xab}, size)
		var buf bytes.Buffer
		if err := WriteFrame(&buf, rec); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		got, err := ReadFrame(&buf, 0)
		if err != nil || !bytes.Equal(got, rec) {
			t.Fatalf("size %d: got %d bytes, %v", size, len(got), err)
		}
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"clean EOF", nil, 0, io.EOF},
		{"cut length", []byte{0, 0}, 0, io.ErrUnexpectedEOF},
		{"cut body", []byte{0, 0, 0, 4, 1}, 0, io.ErrUnexpectedEOF},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xff}, 0, ErrFrameLength},
		{"one over jute.maxbuffer", []byte{0, 0x10, 0, 0}, 0, ErrFrameTooLarge},
		{"over a smaller limit", []byte{0, 0, 0, 9}, 8, ErrFrameTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.in), tc.max)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAppendFrameRefusesOversize(t *testing.T) {
	if _, err := AppendFrame(nil, make([]byte, MaxPacket+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
}
