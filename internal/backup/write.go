package backup

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// Section is one shard's body for Write: WriteBody streams the shard's state
// machine in internal/fsm's snapshot encoding (fsm.FSM.WriteSnapshot of a
// clone).
type Section struct {
	Group     uint64
	WriteBody func(io.Writer) error
}

// Write streams a backup file to w: h, then sections (one per h.Shards, in
// the same order and of the same groups), then the trailer. It holds at most
// one chunk in memory. An error leaves w without a trailer, which every
// reader refuses.
func Write(w io.Writer, h Header, sections []Section) error {
	if len(sections) != len(h.Shards) {
		return fmt.Errorf("backup: %d sections for %d shards", len(sections), len(h.Shards))
	}
	header, err := encodeHeader(h)
	if err != nil {
		return err
	}
	buffered := bufio.NewWriterSize(w, 256<<10)
	file := &summingWriter{w: buffered}
	if _, err := file.Write(header); err != nil {
		return fmt.Errorf("backup: write header: %w", err)
	}
	for i, s := range sections {
		if s.Group != h.Shards[i].Group {
			return fmt.Errorf("backup: section %d is of group %d, the header says %d", i, s.Group, h.Shards[i].Group)
		}
		if err := writeSection(file, s); err != nil {
			return fmt.Errorf("backup: write group %d: %w", s.Group, err)
		}
	}
	trailer := binary.LittleEndian.AppendUint64(nil, file.length)
	trailer = binary.LittleEndian.AppendUint32(trailer, file.checksum)
	trailer = append(trailer, trailerMagic...)
	if _, err := buffered.Write(trailer); err != nil {
		return fmt.Errorf("backup: write trailer: %w", err)
	}
	if err := buffered.Flush(); err != nil {
		return fmt.Errorf("backup: flush: %w", err)
	}
	return nil
}

func writeSection(file *summingWriter, s Section) error {
	if _, err := file.Write(binary.LittleEndian.AppendUint64(nil, s.Group)); err != nil {
		return err
	}
	chunks := &chunkWriter{w: file, buffer: make([]byte, 0, maxChunk)}
	if err := s.WriteBody(chunks); err != nil {
		return err
	}
	if err := chunks.flush(); err != nil {
		return err
	}
	end := binary.LittleEndian.AppendUint32(nil, 0)
	end = binary.LittleEndian.AppendUint32(end, chunks.checksum)
	_, err := file.Write(end)
	return err
}

// summingWriter counts and checksums everything written through it.
type summingWriter struct {
	w        io.Writer
	length   uint64
	checksum uint32
}

func (s *summingWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.checksum = crc32.Update(s.checksum, castagnoli, p[:n])
	s.length += uint64(n)
	return n, err
}

// chunkWriter cuts a body into chunks of at most maxChunk bytes and
// checksums it.
type chunkWriter struct {
	w        io.Writer
	buffer   []byte
	checksum uint32
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), maxChunk-len(c.buffer))
		c.buffer = append(c.buffer, p[:n]...)
		p = p[n:]
		written += n
		if len(c.buffer) == maxChunk {
			if err := c.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buffer) == 0 {
		return nil
	}
	c.checksum = crc32.Update(c.checksum, castagnoli, c.buffer)
	if _, err := c.w.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(c.buffer)))); err != nil {
		return err
	}
	if _, err := c.w.Write(c.buffer); err != nil {
		return err
	}
	c.buffer = c.buffer[:0]
	return nil
}
