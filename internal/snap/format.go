package snap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"go.etcd.io/raft/v3/raftpb"
)

// File format:
//
//	header:  magic "latchSNP" | version u32 | meta length u32 |
//	         meta: group u64, index u64, term u64, marshalled raftpb.ConfState |
//	         CRC32C u32 of all preceding header bytes
//	body:    the bytes the snapshot's writer produced
//	trailer: body length u64 | CRC32C u32 of the body | magic "latchEND"
//
// Integers are little endian. The trailer comes last so the body can be
// streamed without knowing its size in advance; a reader holds back the
// last trailerSize bytes it has read until the stream ends.
const (
	headerMagic   = "latchSNP"
	trailerMagic  = "latchEND"
	formatVersion = 1
	trailerSize   = 8 + 4 + len(trailerMagic)
	// maxMetaSize bounds the header's meta: a ConfState of thousands of
	// members is far below it.
	maxMetaSize = 1 << 20
	fixedMeta   = 3 * 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeHeader(meta Meta) ([]byte, error) {
	confState, err := meta.ConfState.Marshal()
	if err != nil {
		return nil, fmt.Errorf("snap: marshal conf state: %w", err)
	}
	out := []byte(headerMagic)
	out = binary.LittleEndian.AppendUint32(out, formatVersion)
	out = binary.LittleEndian.AppendUint32(out, uint32(fixedMeta+len(confState)))
	out = binary.LittleEndian.AppendUint64(out, meta.Group)
	out = binary.LittleEndian.AppendUint64(out, meta.Index)
	out = binary.LittleEndian.AppendUint64(out, meta.Term)
	out = append(out, confState...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

// errFormat is the reason of every CorruptError produced while parsing.
var errFormat = errors.New("malformed snapshot file")

// readHeader parses the header from r and returns the meta and the header's size.
func readHeader(r io.Reader) (Meta, int64, error) {
	fixed := make([]byte, len(headerMagic)+8)
	if _, err := io.ReadFull(r, fixed); err != nil {
		return Meta{}, 0, fmt.Errorf("%w: header: %v", errFormat, err)
	}
	if string(fixed[:len(headerMagic)]) != headerMagic {
		return Meta{}, 0, fmt.Errorf("%w: bad magic", errFormat)
	}
	if version := binary.LittleEndian.Uint32(fixed[len(headerMagic):]); version != formatVersion {
		return Meta{}, 0, fmt.Errorf("%w: unsupported version %d", errFormat, version)
	}
	metaLength := binary.LittleEndian.Uint32(fixed[len(headerMagic)+4:])
	if metaLength < fixedMeta || metaLength > maxMetaSize {
		return Meta{}, 0, fmt.Errorf("%w: meta length %d", errFormat, metaLength)
	}
	rest := make([]byte, int(metaLength)+4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return Meta{}, 0, fmt.Errorf("%w: header: %v", errFormat, err)
	}
	checksum := crc32.Update(crc32.Checksum(fixed, castagnoli), castagnoli, rest[:metaLength])
	if binary.LittleEndian.Uint32(rest[metaLength:]) != checksum {
		return Meta{}, 0, fmt.Errorf("%w: header checksum mismatch", errFormat)
	}
	meta := Meta{
		Group: binary.LittleEndian.Uint64(rest[0:]),
		Index: binary.LittleEndian.Uint64(rest[8:]),
		Term:  binary.LittleEndian.Uint64(rest[16:]),
	}
	var confState raftpb.ConfState
	if err := confState.Unmarshal(rest[fixedMeta:metaLength]); err != nil {
		return Meta{}, 0, fmt.Errorf("%w: conf state: %v", errFormat, err)
	}
	meta.ConfState = confState
	return meta, int64(len(fixed) + len(rest)), nil
}

func encodeTrailer(length uint64, checksum uint32) []byte {
	out := binary.LittleEndian.AppendUint64(nil, length)
	out = binary.LittleEndian.AppendUint32(out, checksum)
	return append(out, trailerMagic...)
}

// checksumWriter counts and checksums what passes through it.
type checksumWriter struct {
	w        io.Writer
	checksum uint32
	length   uint64
}

func (c *checksumWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.checksum = crc32.Update(c.checksum, castagnoli, p[:n])
	c.length += uint64(n)
	return n, err
}

// bodyReader streams a body, holding back the trailer, and verifies the
// trailer at the end: its final Read returns io.EOF only if the body's
// length and checksum match, else a *CorruptError. It never buffers more
// than a fixed window.
type bodyReader struct {
	source   io.Reader
	file     string
	base     int64 // offset of the body in the file, for error messages
	buffer   []byte
	pending  []byte // read but not yet returned; the last trailerSize may be the trailer
	eof      bool
	checksum uint32
	length   uint64
	err      error
}

func newBodyReader(source io.Reader, file string, base int64) *bodyReader {
	return &bodyReader{source: source, file: file, base: base, buffer: make([]byte, 64<<10)}
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, b.err
	}
	for b.err == nil {
		if releasable := len(b.pending) - trailerSize; releasable > 0 {
			n := copy(p, b.pending[:releasable])
			b.checksum = crc32.Update(b.checksum, castagnoli, p[:n])
			b.length += uint64(n)
			b.pending = b.pending[n:]
			return n, nil
		}
		if b.eof {
			b.err = b.verifyTrailer()
			break
		}
		if err := b.fill(); err != nil {
			b.err = err
		}
	}
	return 0, b.err
}

// fill moves pending to the front of the buffer and reads more after it.
func (b *bodyReader) fill() error {
	count := copy(b.buffer, b.pending)
	n, err := b.source.Read(b.buffer[count:])
	b.pending = b.buffer[:count+n]
	if errors.Is(err, io.EOF) {
		b.eof = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("snap: read %s: %w", b.file, err)
	}
	return nil
}

func (b *bodyReader) verifyTrailer() error {
	offset := b.base + int64(b.length)
	if len(b.pending) < trailerSize {
		return &CorruptError{File: b.file, Offset: offset, Reason: fmt.Errorf("%w: truncated: no trailer", errFormat)}
	}
	trailer := b.pending
	if string(trailer[12:]) != trailerMagic {
		return &CorruptError{File: b.file, Offset: offset + 12, Reason: fmt.Errorf("%w: bad trailer magic", errFormat)}
	}
	if length := binary.LittleEndian.Uint64(trailer); length != b.length {
		return &CorruptError{File: b.file, Offset: offset, Reason: fmt.Errorf("%w: trailer says %d body bytes, read %d", errFormat, length, b.length)}
	}
	if checksum := binary.LittleEndian.Uint32(trailer[8:]); checksum != b.checksum {
		return &CorruptError{File: b.file, Offset: offset + 8, Reason: fmt.Errorf("%w: body checksum mismatch", errFormat)}
	}
	return io.EOF
}

// readStream parses a whole snapshot stream: the header, then a verifying
// body reader.
func readStream(r io.Reader, file string) (Meta, *bodyReader, error) {
	buffered := bufio.NewReaderSize(r, 64<<10)
	meta, headerSize, err := readHeader(buffered)
	if err != nil {
		return Meta{}, nil, &CorruptError{File: file, Offset: 0, Reason: err}
	}
	return meta, newBodyReader(buffered, file, headerSize), nil
}
