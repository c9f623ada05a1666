package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Record framing. Every record is a 16-byte header followed by its payload:
//
//	[0]     recordMagic (0xB7): a record never starts with a zero byte
//	[1]     record type
//	[2:4]   zero
//	[4:8]   payload length, little endian
//	[8:12]  CRC32C (Castagnoli) of the payload
//	[12:16] CRC32C of header bytes [0:12]
//
// The header has its own checksum so that a damaged length is recognised
// as damage rather than trusted (a flipped length bit must never make the
// reader skip or truncate good records). The magic byte has six bits set, so
// no single bit flip turns a record's first byte into the zero an unwritten
// sector leaves. Sixteen zero bytes mark the unwritten, preallocated end of
// a segment.
const (
	recordHeaderSize = 16
	recordMagic      = 0xB7
	// maxPayload bounds a record's payload; larger lengths are corruption.
	maxPayload = 1 << 30
)

type recordType uint8

const (
	recordSegmentHeader recordType = iota + 1
	recordFlush
	recordEntry
	recordHardState
	recordSnapshotMarker
	recordTypeLimit // one past the last valid type
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Decoding failures, classified so the reader can tell a torn tail from damage.
var (
	errZeroHeader      = errors.New("zeroed record header")
	errShortRecord     = errors.New("record runs past the end of the data")
	errHeaderChecksum  = errors.New("record header checksum mismatch")
	errPayloadChecksum = errors.New("record payload checksum mismatch")
	errBadHeader       = errors.New("record header has a bad magic byte, an unknown type or nonzero reserved bytes")
)

// appendRecord appends a framed record to dst.
func appendRecord(dst []byte, kind recordType, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = append(dst, payload...)
	sealRecord(dst[start:], kind)
	return dst
}

// sealRecord fills the header of a record whose payload is already in place:
// frame is header plus payload.
func sealRecord(frame []byte, kind recordType) {
	header := frame[:recordHeaderSize]
	payload := frame[recordHeaderSize:]
	header[0], header[1], header[2], header[3] = recordMagic, byte(kind), 0, 0
	binary.LittleEndian.PutUint32(header[4:8], uint32(len(payload)))
	binary.LittleEndian.PutUint32(header[8:12], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(header[12:16], crc32.Checksum(header[:12], castagnoli))
}

// decodedRecord is one record read from a byte slice.
type decodedRecord struct {
	kind    recordType
	payload []byte // aliases the input
	size    int    // header plus payload
}

// decodeRecord decodes the record at data[offset:]. It never panics and
// never allocates in proportion to a length it read.
func decodeRecord(data []byte, offset int) (decodedRecord, error) {
	if offset < 0 || offset > len(data) {
		return decodedRecord{}, fmt.Errorf("offset %d outside %d bytes", offset, len(data))
	}
	rest := data[offset:]
	if len(rest) < recordHeaderSize {
		if allZero(rest) {
			return decodedRecord{}, errZeroHeader
		}
		return decodedRecord{}, errShortRecord
	}
	header := rest[:recordHeaderSize]
	if allZero(header) {
		return decodedRecord{}, errZeroHeader
	}
	if binary.LittleEndian.Uint32(header[12:16]) != crc32.Checksum(header[:12], castagnoli) {
		return decodedRecord{}, errHeaderChecksum
	}
	kind := recordType(header[1])
	if header[0] != recordMagic || kind == 0 || kind >= recordTypeLimit || header[2]|header[3] != 0 {
		return decodedRecord{}, errBadHeader
	}
	length := binary.LittleEndian.Uint32(header[4:8])
	if length > maxPayload {
		return decodedRecord{}, errBadHeader
	}
	if uint64(len(rest)-recordHeaderSize) < uint64(length) {
		return decodedRecord{}, errShortRecord
	}
	payload := rest[recordHeaderSize : recordHeaderSize+int(length)]
	if binary.LittleEndian.Uint32(header[8:12]) != crc32.Checksum(payload, castagnoli) {
		return decodedRecord{}, errPayloadChecksum
	}
	return decodedRecord{kind: kind, payload: payload, size: recordHeaderSize + int(length)}, nil
}

func allZero(data []byte) bool {
	for len(data) >= 8 {
		if binary.LittleEndian.Uint64(data) != 0 {
			return false
		}
		data = data[8:]
	}
	for _, b := range data {
		if b != 0 {
			return false
		}
	}
	return true
}
