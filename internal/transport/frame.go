package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Wire format. Every connection starts with a handshake from the dialer,
// answered by one status byte from the acceptor:
//
//	handshake: magic "LTCH" | version u8 | kind u8 | shards u16 | cluster u64 | from u64 | to u64
//	status:    u8 (statusOK, or the reason the acceptor refused and closes)
//
// A message connection (kindMessages) then carries frames from dialer to
// acceptor only, in the order they were sent. The top bit of the length word
// tells the two kinds of frame apart:
//
//	frame:      length u32 | group u64 | raftpb.Message (gogoproto), length = 8 + len(message) < 2^31
//	peer frame: 1<<31 | length u32 | crc32c(body) u32 | body, length = 4 + len(body) (see peermsg.go)
//
// A raft frame is handed to Handler.Process, a peer frame to
// Handler.ReceivePeer; raft never sees a peer frame.
//
// A snapshot connection (kindSnapshot) carries exactly one snapshot:
//
//	frame (the MsgSnap) | body length u64 | chunks ... | terminator | (acceptor) status u8 | text length u16 | text
//	chunk:      length u32 (> 0) | crc32c(data) u32 | data
//	terminator: 0 u32 | crc32c(whole body) u32
//
// shards is the dialer's shard count (Config.Shards): one connection carries
// the messages of every shard, and members of one cluster must agree on how
// many there are. All integers are big-endian.

const (
	protocolVersion  = 3 // 2: message connections may carry peer frames; 3: the handshake carries the shard count
	handshakeSize    = 32
	frameHeaderSize  = 12 // length u32 + group u64
	peerFrameFlag    = 1 << 31
	chunkHeaderSize  = 8 // length u32 + crc u32
	maxStatusText    = 1024
	kindMessages     = 1
	kindSnapshot     = 2
	statusOK         = 0
	statusCluster    = 1 // cluster id mismatch
	statusWrongPeer  = 2 // the dialer wanted another node id
	statusBadRequest = 3 // unknown version or kind
	statusFailed     = 4 // snapshot: stored or processed with an error
	statusShards     = 5 // shard count mismatch
)

var magic = [4]byte{'L', 'T', 'C', 'H'}

// handshake is the first thing a dialer writes on a connection.
type handshake struct {
	version uint8
	kind    uint8
	shards  uint16
	cluster uint64
	from    uint64
	to      uint64
}

func (h handshake) encode() []byte {
	b := make([]byte, handshakeSize)
	copy(b, magic[:])
	b[4] = h.version
	b[5] = h.kind
	binary.BigEndian.PutUint16(b[6:], h.shards)
	binary.BigEndian.PutUint64(b[8:], h.cluster)
	binary.BigEndian.PutUint64(b[16:], h.from)
	binary.BigEndian.PutUint64(b[24:], h.to)
	return b
}

func readHandshake(r io.Reader) (handshake, error) {
	var b [handshakeSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return handshake{}, fmt.Errorf("read handshake: %w", err)
	}
	if [4]byte(b[:4]) != magic {
		return handshake{}, fmt.Errorf("handshake magic %q: %w", b[:4], ErrCorrupt)
	}
	return handshake{
		version: b[4],
		kind:    b[5],
		shards:  binary.BigEndian.Uint16(b[6:]),
		cluster: binary.BigEndian.Uint64(b[8:]),
		from:    binary.BigEndian.Uint64(b[16:]),
		to:      binary.BigEndian.Uint64(b[24:]),
	}, nil
}

// statusError turns a refusal status from the acceptor into an error.
func statusError(status byte) error {
	switch status {
	case statusOK:
		return nil
	case statusCluster:
		return ErrClusterMismatch
	case statusWrongPeer:
		return ErrWrongPeer
	case statusShards:
		return ErrShardMismatch
	default:
		return fmt.Errorf("peer refused with status %d", status)
	}
}

// appendFrame appends the frame of m in group to buf.
func appendFrame(buf []byte, group uint64, m *raftpb.Message) ([]byte, error) {
	size := m.Size()
	start := len(buf)
	buf = grow(buf, frameHeaderSize+size)
	frame := buf[start:]
	binary.BigEndian.PutUint32(frame, uint32(8+size))
	binary.BigEndian.PutUint64(frame[4:], group)
	if _, err := m.MarshalToSizedBuffer(frame[frameHeaderSize:]); err != nil {
		return buf[:start], fmt.Errorf("marshal %s to %d: %w", m.Type, m.To, err)
	}
	return buf, nil
}

// grow extends buf by n bytes, reallocating if needed.
func grow(buf []byte, n int) []byte {
	if need := len(buf) + n; need > cap(buf) {
		bigger := make([]byte, len(buf), max(need, 2*cap(buf)))
		copy(bigger, buf)
		buf = bigger
	}
	return buf[:len(buf)+n]
}

// appendPeerFrame appends the peer frame of m to buf.
func appendPeerFrame(buf []byte, m PeerMessage) ([]byte, error) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	buf, err := appendPeerMessage(buf, m)
	if err != nil {
		return buf[:start], err
	}
	binary.BigEndian.PutUint32(buf[start:], peerFrameFlag|uint32(len(buf)-start-4))
	return buf, nil
}

// inboundFrame is one frame read from a message connection: a raft message
// of a group, or a peer message.
type inboundFrame struct {
	group   uint64
	message raftpb.Message
	peer    PeerMessage // not nil for a peer frame
	size    int         // bytes on the wire, length word included
}

// frameReader reads frames from one connection, reusing its buffer.
// Unmarshal copies every byte slice, so reuse is safe.
type frameReader struct {
	reader   io.Reader // buffered by the caller; read exactly frame by frame
	buf      []byte
	maxFrame int
	offset   int64 // bytes consumed so far, for error messages
}

// next reads one frame. An error wrapping ErrCorrupt or ErrFrameTooLarge
// means the stream cannot continue. An error wrapping errBadPeerMessage
// means one peer frame did not decode; it was consumed (its size is in the
// frame) and the stream goes on.
func (f *frameReader) next() (inboundFrame, error) {
	var word [4]byte
	if _, err := io.ReadFull(f.reader, word[:]); err != nil {
		return inboundFrame{}, f.wrapEOF(err)
	}
	length := binary.BigEndian.Uint32(word[:])
	if length&peerFrameFlag != 0 {
		return f.nextPeer(int64(length &^ peerFrameFlag))
	}
	return f.nextRaft(int64(length))
}

// nextRaftOnly reads one frame that must be a raft message.
func (f *frameReader) nextRaftOnly() (uint64, raftpb.Message, error) {
	frame, err := f.next()
	if (err == nil && frame.peer != nil) || errors.Is(err, errBadPeerMessage) {
		return 0, raftpb.Message{}, fmt.Errorf("peer frame where a raft message was expected: %w", ErrCorrupt)
	}
	return frame.group, frame.message, err
}

// nextRaft reads the rest of a raft frame whose length word was length.
func (f *frameReader) nextRaft(length int64) (inboundFrame, error) {
	var group [8]byte
	if _, err := io.ReadFull(f.reader, group[:]); err != nil {
		return inboundFrame{}, fmt.Errorf("frame header at offset %d: %w", f.offset, noEOF(err))
	}
	if length < 8 {
		return inboundFrame{}, fmt.Errorf("frame at offset %d: length %d: %w", f.offset, length, ErrCorrupt)
	}
	if length > int64(f.maxFrame) {
		return inboundFrame{}, fmt.Errorf("frame at offset %d: length %d over %d: %w", f.offset, length, f.maxFrame, ErrFrameTooLarge)
	}
	body := int(length - 8)
	if err := f.readBody(body); err != nil {
		return inboundFrame{}, fmt.Errorf("frame at offset %d: %w", f.offset, noEOF(err))
	}
	m := roomFor(f.buf)
	err := m.Unmarshal(f.buf)
	f.release()
	if err != nil {
		return inboundFrame{}, fmt.Errorf("frame at offset %d: unmarshal: %v: %w", f.offset, err, ErrCorrupt)
	}
	size := frameHeaderSize + body
	f.offset += int64(size)
	return inboundFrame{group: binary.BigEndian.Uint64(group[:]), message: m, size: size}, nil
}

// roomFor returns a message with room for the entries of the marshalled
// raftpb.Message body, which Unmarshal appends one by one. The count is of
// fields that may not decode: a body of malformed entries gets no more room
// than maxPresized (Unmarshal grows the slice past it if they do decode).
func roomFor(body []byte) raftpb.Message {
	var m raftpb.Message
	if n := entryCount(body); n > 1 {
		m.Entries = make([]raftpb.Entry, 0, min(n, maxPresized))
	}
	return m
}

// entriesField is raftpb.Message's field number of Entries.
const entriesField = 7

// maxPresized bounds the Entries a frame's message is given room for
// before it is decoded (48 KiB), far above a loaded leader's append.
const maxPresized = 1024

// entryCount returns how many entries the marshalled raftpb.Message b
// holds, from its top-level fields, or 0 if they do not parse (Unmarshal
// then says why). A count is at most len(b)/2: each field takes a tag and
// a length.
func entryCount(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return 0
		}
		b = b[k:]
		if num == entriesField && typ == protowire.BytesType {
			n++
		}
		if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
			return 0
		}
		b = b[k:]
	}
	return n
}

// nextPeer reads the rest of a peer frame of length bytes after its length
// word. A frame too short for its header or too long for any peer message
// breaks the stream; one that is merely malformed is skipped.
func (f *frameReader) nextPeer(length int64) (inboundFrame, error) {
	if length < peerHeaderSize {
		return inboundFrame{}, fmt.Errorf("peer frame at offset %d: length %d: %w", f.offset, length, ErrCorrupt)
	}
	if length > min(maxPeerFrame, int64(f.maxFrame)) {
		return inboundFrame{}, fmt.Errorf("peer frame at offset %d: length %d over %d: %w", f.offset, length, min(maxPeerFrame, f.maxFrame), ErrFrameTooLarge)
	}
	if err := f.readBody(int(length)); err != nil {
		return inboundFrame{}, fmt.Errorf("peer frame at offset %d: %w", f.offset, noEOF(err))
	}
	m, err := decodePeerMessage(f.buf)
	f.release()
	frame := inboundFrame{peer: m, size: 4 + int(length)}
	if err != nil {
		err = fmt.Errorf("peer frame at offset %d: %w", f.offset, err)
	}
	f.offset += int64(frame.size)
	return frame, err
}

// release drops the buffer after a huge frame, so as not to pin its memory.
func (f *frameReader) release() {
	if cap(f.buf) > keptBuffer {
		f.buf = nil
	}
}

// keptBuffer is the largest frame buffer a frameReader keeps between frames;
// larger frames are also read in steps of this size, so that a frame header
// claiming a huge length costs memory only as its bytes actually arrive.
const keptBuffer = 1 << 20

// readBody reads the next size bytes into f.buf.
func (f *frameReader) readBody(size int) error {
	f.buf = f.buf[:0]
	for len(f.buf) < size {
		step := min(size-len(f.buf), keptBuffer)
		f.buf = slices.Grow(f.buf, step)
		n, err := io.ReadFull(f.reader, f.buf[len(f.buf):len(f.buf)+step])
		f.buf = f.buf[:len(f.buf)+n]
		if err != nil {
			return err
		}
	}
	return nil
}

// wrapEOF keeps a clean io.EOF between frames and names the offset otherwise.
func (f *frameReader) wrapEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	return fmt.Errorf("frame header at offset %d: %w", f.offset, err)
}

// noEOF turns an EOF inside a structure into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
