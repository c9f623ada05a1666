package transport

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net"
	"time"
)

// deadlineReader reads from a buffered connection, extending the read
// deadline before every read so that a stalled sender is noticed while a
// slow but moving one is not cut off.
type deadlineReader struct {
	conn    net.Conn
	reader  *bufio.Reader
	timeout time.Duration
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	d.conn.SetReadDeadline(time.Now().Add(d.timeout))
	return d.reader.Read(p)
}

// chunkReader turns the chunked snapshot body of the wire format into a
// plain stream. It releases a chunk's bytes only after the chunk's CRC
// matched, returns io.EOF only after the terminator's whole-body CRC and
// the declared length matched, and keeps its first error.
type chunkReader struct {
	reader   io.Reader
	size     int64 // declared body length
	maxChunk int
	total    hash.Hash32 // crc32c of the body so far

	buffer  []byte
	pending []byte // verified bytes not yet returned
	read    int64  // body bytes received so far
	done    bool   // the terminator was read and verified
	err     error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(c.pending) == 0 {
		if c.done {
			return 0, io.EOF
		}
		if err := c.nextChunk(); err != nil {
			c.err = err
			return 0, err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// nextChunk reads and verifies one chunk or the terminator.
func (c *chunkReader) nextChunk() error {
	var header [chunkHeaderSize]byte
	if _, err := io.ReadFull(c.reader, header[:]); err != nil {
		return fmt.Errorf("snapshot chunk header at body offset %d: %w", c.read, noEOF(err))
	}
	length := int64(binary.BigEndian.Uint32(header[:]))
	sum := binary.BigEndian.Uint32(header[4:])
	switch {
	case length == 0 && c.read != c.size:
		return fmt.Errorf("snapshot body ended at %d bytes, declared %d: %w", c.read, c.size, ErrCorrupt)
	case length == 0 && sum != c.total.Sum32():
		return fmt.Errorf("snapshot body crc %08x, terminator says %08x: %w", c.total.Sum32(), sum, ErrCorrupt)
	case length == 0:
		c.done = true
		return nil
	case length > int64(c.maxChunk) || c.read+length > c.size:
		return fmt.Errorf("snapshot chunk of %d bytes at body offset %d (declared %d, limit %d): %w", length, c.read, c.size, c.maxChunk, ErrCorrupt)
	}
	if int64(cap(c.buffer)) < length {
		c.buffer = make([]byte, length)
	}
	data := c.buffer[:length]
	if _, err := io.ReadFull(c.reader, data); err != nil {
		return fmt.Errorf("snapshot chunk at body offset %d: %w", c.read, noEOF(err))
	}
	if got := crc32.Checksum(data, castagnoli); got != sum {
		return fmt.Errorf("snapshot chunk at body offset %d: crc %08x, header says %08x: %w", c.read, got, sum, ErrCorrupt)
	}
	c.total.Write(data)
	c.read += length
	c.pending = data
	return nil
}

// finish checks, after Snapshots.Receive returned nil, that the whole body
// was consumed and verified.
func (c *chunkReader) finish() error {
	if c.done && len(c.pending) == 0 {
		return nil
	}
	unread, err := io.Copy(io.Discard, c)
	if err != nil {
		return err
	}
	if unread > 0 {
		return fmt.Errorf("snapshot store returned with %d body bytes unread", unread)
	}
	return nil
}
