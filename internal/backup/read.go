package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/latch-io/latch/internal/fsm"
)

// Contents is what a verified backup file holds.
type Contents struct {
	Header Header
	// States are the shards' state machines, in header order.
	States []*fsm.FSM
	// Size is the file's length in bytes.
	Size int64
}

// Read reads and verifies a whole backup file from r; name names it in
// errors. Every checksum is checked, every section decoded and compared with
// the header, and the trailer must end the input. A damaged, truncated or
// overlong input is a *CorruptError naming name and the byte offset.
func Read(r io.Reader, name string) (*Contents, error) {
	fr := &fileReader{r: bufio.NewReaderSize(r, 256<<10), name: name}
	h, err := fr.readHeader()
	if err != nil {
		return nil, err
	}
	contents := &Contents{Header: h}
	for i, shard := range h.Shards {
		state, err := fr.readSection(shard, i, len(h.Shards))
		if err != nil {
			return nil, err
		}
		contents.States = append(contents.States, state)
	}
	if err := fr.readTrailer(); err != nil {
		return nil, err
	}
	contents.Size = fr.offset
	return contents, nil
}

// fileReader consumes a file, tracking the offset and the checksum of every
// byte read.
type fileReader struct {
	r        *bufio.Reader
	name     string
	offset   int64
	checksum uint32
}

func (fr *fileReader) corrupt(offset int64, format string, args ...any) error {
	return &CorruptError{File: fr.name, Offset: offset, Reason: fmt.Sprintf(format, args...)}
}

// readFull reads exactly n bytes; running out is a truncation at the offset
// where the input ended.
func (fr *fileReader) readFull(n int, what string) ([]byte, error) {
	buf := make([]byte, n)
	got, err := io.ReadFull(fr.r, buf)
	fr.checksum = crc32.Update(fr.checksum, castagnoli, buf[:got])
	fr.offset += int64(got)
	switch {
	case err == nil:
		return buf, nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fr.corrupt(fr.offset, "truncated in %s", what)
	default:
		return nil, fmt.Errorf("backup: read %s at byte offset %d: %w", fr.name, fr.offset, err)
	}
}

func (fr *fileReader) readHeader() (Header, error) {
	fixed, err := fr.readFull(len(headerMagic)+8, "the header")
	if err != nil {
		return Header{}, err
	}
	if string(fixed[:len(headerMagic)]) != headerMagic {
		return Header{}, fr.corrupt(0, "not a latch backup file (bad magic)")
	}
	if version := binary.LittleEndian.Uint32(fixed[len(headerMagic):]); version != formatVersion {
		return Header{}, fr.corrupt(int64(len(headerMagic)), "unsupported format version %d", version)
	}
	length := binary.LittleEndian.Uint32(fixed[len(headerMagic)+4:])
	if length > maxHeaderSize {
		return Header{}, fr.corrupt(int64(len(headerMagic))+4, "header length %d over %d", length, maxHeaderSize)
	}
	fieldsAt := fr.offset
	fields, err := fr.readFull(int(length), "the header")
	if err != nil {
		return Header{}, err
	}
	want := fr.checksum
	sum, err := fr.readFull(4, "the header checksum")
	if err != nil {
		return Header{}, err
	}
	if binary.LittleEndian.Uint32(sum) != want {
		return Header{}, fr.corrupt(fr.offset-4, "header checksum mismatch")
	}
	h, at, reason := decodeFields(fields, fieldsAt)
	if reason != "" {
		return Header{}, fr.corrupt(at, "%s", reason)
	}
	return h, nil
}

// readSection reads the section of shard index of shards: its body must be
// a snapshot of that shard (fsm.ReadShardSnapshot).
func (fr *fileReader) readSection(shard Shard, index, shards int) (*fsm.FSM, error) {
	start := fr.offset
	group, err := fr.readFull(8, "a section")
	if err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint64(group); got != shard.Group {
		return nil, fr.corrupt(start, "section of group %d where the header lists group %d", got, shard.Group)
	}
	body := &chunkReader{fr: fr}
	state, err := fsm.ReadShardSnapshot(body, index, shards)
	if body.err != nil {
		return nil, body.err // the chunk framing failed first
	}
	if err != nil {
		return nil, fr.corrupt(fr.offset, "group %d: %v", shard.Group, err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, err
	}
	want := body.checksum
	sum, err := fr.readFull(4, "a section checksum")
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(sum) != want {
		return nil, fr.corrupt(fr.offset-4, "group %d: body checksum mismatch", shard.Group)
	}
	return state, checkShard(fr, shard, state)
}

func checkShard(fr *fileReader, shard Shard, state *fsm.FSM) error {
	nodes, sessions := uint64(state.NodeCount()), uint64(state.SessionCount())
	if state.Applied() != shard.Index || nodes != shard.NodeCount || sessions != shard.SessionCount {
		return fr.corrupt(fr.offset, "group %d holds index %d, %d nodes, %d sessions; the header says %d, %d, %d",
			shard.Group, state.Applied(), nodes, sessions, shard.Index, shard.NodeCount, shard.SessionCount)
	}
	return nil
}

func (fr *fileReader) readTrailer() error {
	length, checksum := fr.offset, fr.checksum
	trailer, err := fr.readFull(trailerSize, "the trailer")
	if err != nil {
		return err
	}
	at := fr.offset - int64(trailerSize)
	if string(trailer[12:]) != trailerMagic {
		return fr.corrupt(at+12, "bad trailer magic")
	}
	if got := binary.LittleEndian.Uint64(trailer); got != uint64(length) {
		return fr.corrupt(at, "trailer says %d bytes before it, read %d", got, length)
	}
	if binary.LittleEndian.Uint32(trailer[8:]) != checksum {
		return fr.corrupt(at+8, "file checksum mismatch")
	}
	if _, err := fr.r.ReadByte(); err == nil {
		return fr.corrupt(fr.offset, "bytes after the trailer")
	}
	return nil
}

// chunkReader yields a section's body from its chunks, checksumming it; it
// returns io.EOF at the empty chunk that ends the body. A framing error is
// kept in err as well as returned, so the caller can tell it from a decoding
// error of the body.
type chunkReader struct {
	fr       *fileReader
	left     int // bytes left in the current chunk
	done     bool
	checksum uint32
	err      error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for c.left == 0 && !c.done {
		if err := c.nextChunk(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if c.done {
		return 0, io.EOF
	}
	data, err := c.fr.readFull(min(len(p), c.left), "a section body")
	if err != nil {
		c.err = err
		return 0, err
	}
	c.left -= len(data)
	c.checksum = crc32.Update(c.checksum, castagnoli, data)
	return copy(p, data), nil
}

func (c *chunkReader) nextChunk() error {
	at := c.fr.offset
	length, err := c.fr.readFull(4, "a chunk length")
	if err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(length)
	if n > maxChunk {
		return c.fr.corrupt(at, "chunk length %d over %d", n, maxChunk)
	}
	c.left, c.done = int(n), n == 0
	return nil
}
