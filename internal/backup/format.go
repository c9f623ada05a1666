package backup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
)

// File format, version 1. Integers are little endian.
//
//	header  = magic "LATCHBAK", format version u32, header length u32,
//	          header fields, CRC-32C u32 of everything before it
//	fields  = cluster token hash u64, taken-at unix milliseconds u64,
//	          member name (u32 length, bytes), shard count u32,
//	          per shard: group u64, applied index u64, term u64,
//	          node count u64, session count u64
//	section = per shard, in header order: group u64, then the body as chunks
//	          (length u32, bytes; a zero length ends the body), then the
//	          CRC-32C u32 of the body's bytes
//	trailer = total length u64 of everything before the trailer, CRC-32C
//	          u32 of everything before the trailer, magic "LATCHEND"
//
// A body is internal/fsm's snapshot encoding of the shard's state machine.
// Bodies are chunked so that a member streams them without knowing their
// size in advance; the trailer comes last, so a stream cut anywhere is
// refused.
const (
	headerMagic   = "LATCHBAK"
	trailerMagic  = "LATCHEND"
	formatVersion = 1
	trailerSize   = 8 + 4 + len(trailerMagic)
	// maxHeaderSize bounds the header fields: thousands of shards fit.
	maxHeaderSize = 1 << 20
	// maxChunk bounds one chunk of a body, written and read.
	maxChunk = 1 << 20
	// maxNameLen bounds the member name in the header.
	maxNameLen  = 1 << 10
	shardFields = 5 * 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is matched by every error about a damaged or truncated file.
var ErrCorrupt = errors.New("backup: corrupt backup file")

// CorruptError names a damaged backup file and the byte offset of the damage.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("backup: corrupt backup file %s at byte offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Header describes a backup file: whose state it is and what each shard's
// section holds.
type Header struct {
	// TokenHash is TokenHash of the cluster token of the member that wrote it.
	TokenHash uint64
	// TakenAtUnixMs is when the member took it (its wall clock).
	TakenAtUnixMs uint64
	// Member is the name of the member that wrote it.
	Member string
	Shards []Shard
}

// Shard is one consensus group's section as the header announces it.
type Shard struct {
	Group        uint64
	Index        uint64 // the applied index of the state
	Term         uint64 // the group's raft term when the state was taken
	NodeCount    uint64
	SessionCount uint64
}

// TokenHash is the hash of a cluster token a backup file records, so a
// restore can tell a new cluster identity from the old one.
func TokenHash(token string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("latch-cluster-token:" + token))
	return h.Sum64()
}

// MaxIndex returns the highest applied index of h's shards.
func (h Header) MaxIndex() uint64 {
	var highest uint64
	for _, s := range h.Shards {
		highest = max(highest, s.Index)
	}
	return highest
}

func encodeHeader(h Header) ([]byte, error) {
	if len(h.Member) > maxNameLen {
		return nil, fmt.Errorf("backup: member name of %d bytes over %d", len(h.Member), maxNameLen)
	}
	if len(h.Shards) == 0 {
		return nil, errors.New("backup: no shard to write")
	}
	var fields []byte
	fields = binary.LittleEndian.AppendUint64(fields, h.TokenHash)
	fields = binary.LittleEndian.AppendUint64(fields, h.TakenAtUnixMs)
	fields = binary.LittleEndian.AppendUint32(fields, uint32(len(h.Member)))
	fields = append(fields, h.Member...)
	fields = binary.LittleEndian.AppendUint32(fields, uint32(len(h.Shards)))
	for _, s := range h.Shards {
		for _, v := range []uint64{s.Group, s.Index, s.Term, s.NodeCount, s.SessionCount} {
			fields = binary.LittleEndian.AppendUint64(fields, v)
		}
	}
	if len(fields) > maxHeaderSize {
		return nil, fmt.Errorf("backup: header of %d bytes over %d", len(fields), maxHeaderSize)
	}
	out := []byte(headerMagic)
	out = binary.LittleEndian.AppendUint32(out, formatVersion)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(fields)))
	out = append(out, fields...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

// decodeFields parses the header fields; offset is where they start in the
// file, for errors.
func decodeFields(fields []byte, offset int64) (Header, int64, string) {
	d := fieldDecoder{b: fields}
	var h Header
	h.TokenHash = d.u64()
	h.TakenAtUnixMs = d.u64()
	nameLen := d.u32()
	if nameLen > maxNameLen {
		return Header{}, offset + int64(d.at-4), fmt.Sprintf("member name length %d over %d", nameLen, maxNameLen)
	}
	h.Member = string(d.bytes(int(nameLen)))
	count := d.u32()
	if d.short {
		return Header{}, offset + int64(len(fields)), "header fields truncated"
	}
	if count == 0 || uint64(count)*shardFields != uint64(len(fields)-d.at) {
		return Header{}, offset + int64(d.at-4), fmt.Sprintf("shard count %d does not match the header length", count)
	}
	for range count {
		h.Shards = append(h.Shards, Shard{Group: d.u64(), Index: d.u64(), Term: d.u64(), NodeCount: d.u64(), SessionCount: d.u64()})
	}
	seen := map[uint64]bool{}
	for _, s := range h.Shards {
		if seen[s.Group] {
			return Header{}, offset, fmt.Sprintf("shard %d listed twice", s.Group)
		}
		seen[s.Group] = true
	}
	return h, 0, ""
}

// fieldDecoder reads fixed-size fields, noting a short input instead of
// failing on each read.
type fieldDecoder struct {
	b     []byte
	at    int
	short bool
}

func (d *fieldDecoder) bytes(n int) []byte {
	if d.short || n > len(d.b)-d.at {
		d.short = true
		return nil
	}
	out := d.b[d.at : d.at+n]
	d.at += n
	return out
}

func (d *fieldDecoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *fieldDecoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
