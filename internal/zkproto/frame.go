package zkproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxPacket is the largest record a frame may carry: ZooKeeper's
// jute.maxbuffer default, 0xfffff bytes (1 MiB minus one byte). The server
// refuses a longer or negative frame length before reading the body.
const MaxPacket = 0xfffff

// ErrFrameTooLarge is wrapped by the error for a frame length above the limit.
var ErrFrameTooLarge = errors.New("zkproto: frame too large")

// ErrFrameLength is wrapped by the error for a negative frame length.
var ErrFrameLength = errors.New("zkproto: negative frame length")

// ReadFrame reads one frame (a 4-byte big-endian length, then the record)
// from r and returns the record. A length above max (MaxPacket if max <= 0)
// or below zero is refused without reading the body. A clean EOF before the
// length is io.EOF; a cut inside the frame is io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		max = MaxPacket
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 {
		return nil, fmt.Errorf("%w: %d", ErrFrameLength, n)
	}
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("zkproto: frame body: %w", err)
	}
	return body, nil
}

// AppendFrame appends record to dst behind its 4-byte length. A record
// longer than MaxPacket is refused: no client would read it.
func AppendFrame(dst, record []byte) ([]byte, error) {
	if len(record) > MaxPacket {
		return dst, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(record), MaxPacket)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(record)))
	return append(dst, record...), nil
}

// WriteFrame writes record to w as one frame.
func WriteFrame(w io.Writer, record []byte) error {
	buf, err := AppendFrame(make([]byte, 0, 4+len(record)), record)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}
