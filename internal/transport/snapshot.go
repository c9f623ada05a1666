package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sendSnapshot streams the body of m to the peer on its own connection, in
// a goroutine, and ends in Handler.ReportSnapshot. One snapshot per peer is
// in flight at a time; raft sends no other until the first is reported.
func (p *peer) sendSnapshot(group uint64, m raftpb.Message) {
	if !p.sending.CompareAndSwap(false, true) {
		p.t.start(func() {
			p.t.reportSnapshot(group, p.id, errors.New("a snapshot to this peer is already in flight"))
		})
		return
	}
	p.t.start(func() {
		defer p.sending.Store(false)
		p.t.reportSnapshot(group, p.id, p.streamSnapshot(group, m))
	})
}

// streamSnapshot sends one snapshot and waits for the receiver's verdict.
func (p *peer) streamSnapshot(group uint64, m raftpb.Message) error {
	snapshots := p.t.cfg.Snapshots
	if snapshots == nil {
		return ErrNoSnapshots
	}
	body, size, err := snapshots.Open(group, m)
	if err != nil {
		return fmt.Errorf("open snapshot at index %d: %w", m.Snapshot.Metadata.Index, err)
	}
	defer body.Close()
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	conn, err := p.t.dial(p.t.ctx, addr, p.id, kindSnapshot)
	if err != nil {
		return err
	}
	if !p.t.track(conn) {
		return ErrClosed
	}
	defer p.t.untrack(conn)
	if err := p.writeSnapshot(conn, group, m, body, size); err != nil {
		return fmt.Errorf("stream snapshot at index %d (%d bytes): %w", m.Snapshot.Metadata.Index, size, err)
	}
	return p.readVerdict(conn)
}

// writeSnapshot writes the MsgSnap frame, the body length and the body in
// checksummed chunks, then the terminator.
func (p *peer) writeSnapshot(conn net.Conn, group uint64, m raftpb.Message, body io.Reader, size int64) error {
	frame, err := appendFrame(nil, group, &m)
	if err != nil {
		return err
	}
	frame = binary.BigEndian.AppendUint64(frame, uint64(size))
	writer := newBufferedWriter(conn)
	conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
	if _, err := writer.Write(frame); err != nil {
		return err
	}
	chunk := make([]byte, chunkHeaderSize+p.t.cfg.SnapshotChunkSize)
	var sent int64
	total := crc32.New(castagnoli)
	for {
		n, readErr := io.ReadFull(body, chunk[chunkHeaderSize:])
		if n > 0 {
			sent += int64(n)
			if sent > size {
				return fmt.Errorf("body longer than its declared %d bytes", size)
			}
			data := chunk[chunkHeaderSize : chunkHeaderSize+n]
			total.Write(data)
			binary.BigEndian.PutUint32(chunk, uint32(n))
			binary.BigEndian.PutUint32(chunk[4:], crc32.Checksum(data, castagnoli))
			conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
			if _, err := writer.Write(chunk[:chunkHeaderSize+n]); err != nil {
				return err
			}
		}
		if errors.Is(readErr, io.EOF) || errors.Is(readErr, io.ErrUnexpectedEOF) {
			break
		}
		if readErr != nil {
			return fmt.Errorf("read body at offset %d: %w", sent, readErr)
		}
	}
	if sent != size {
		return fmt.Errorf("body has %d bytes, declared %d", sent, size)
	}
	p.t.counters.bytesSent.Add(uint64(sent))
	var terminator [chunkHeaderSize]byte
	binary.BigEndian.PutUint32(terminator[4:], total.Sum32())
	writer.Write(terminator[:])
	conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
	return writer.Flush()
}

// readVerdict waits for the receiver to store and process the snapshot.
func (p *peer) readVerdict(conn net.Conn) error {
	conn.SetReadDeadline(time.Now().Add(p.t.cfg.SnapshotTimeout))
	var header [3]byte
	if _, err := io.ReadFull(conn, header[:]); err != nil {
		return fmt.Errorf("read snapshot verdict: %w", err)
	}
	if header[0] == statusOK {
		return nil
	}
	text := make([]byte, min(int(binary.BigEndian.Uint16(header[1:])), maxStatusText))
	io.ReadFull(conn, text)
	return fmt.Errorf("receiver refused snapshot (status %d): %s", header[0], text)
}

// receiveSnapshot reads one snapshot from conn, stores it through
// Snapshots.Receive, hands the MsgSnap to Handler.Process and answers.
func (t *TCP) receiveSnapshot(conn net.Conn, reader *bufio.Reader, from uint64) {
	idle := &deadlineReader{conn: conn, reader: reader, timeout: t.cfg.WriteTimeout}
	group, m, err := t.receiveSnapshotBody(idle, from)
	if err == nil {
		err = t.cfg.Handler.Process(t.ctx, group, m)
		if err != nil {
			err = fmt.Errorf("process snapshot: %w", err)
		}
	}
	verdict := []byte{statusOK, 0, 0}
	if err != nil {
		t.logger.Warn("snapshot receive failed", "peer", from, "group", group, "err", err)
		text := []byte(err.Error())
		text = text[:min(len(text), maxStatusText)]
		verdict = binary.BigEndian.AppendUint16([]byte{statusFailed}, uint16(len(text)))
		verdict = append(verdict, text...)
	} else {
		t.counters.snapshotsRecvd.Add(1)
		t.logger.Info("snapshot received", "peer", from, "group", group, "index", m.Snapshot.Metadata.Index)
	}
	conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	conn.Write(verdict)
}

// receiveSnapshotBody reads the MsgSnap frame and streams the body into
// Snapshots.Receive. Errors wrapping ErrCorrupt are counted as rejected frames.
func (t *TCP) receiveSnapshotBody(idle *deadlineReader, from uint64) (uint64, raftpb.Message, error) {
	frames := frameReader{reader: idle, maxFrame: t.cfg.MaxFrameSize}
	group, m, err := frames.nextRaftOnly()
	if err == nil && (m.Type != raftpb.MsgSnap || m.From != from || m.To != t.cfg.ID) {
		err = fmt.Errorf("snapshot stream opened by %s from %d to %d: %w", m.Type, m.From, m.To, ErrCorrupt)
	}
	if err != nil {
		t.counters.framesRejected.Add(1)
		return group, m, fmt.Errorf("snapshot header: %w", err)
	}
	var sizeBytes [8]byte
	if _, err := io.ReadFull(idle, sizeBytes[:]); err != nil {
		return group, m, fmt.Errorf("snapshot length: %w", noEOF(err))
	}
	if t.cfg.Snapshots == nil {
		return group, m, ErrNoSnapshots
	}
	body := &chunkReader{reader: idle, size: int64(binary.BigEndian.Uint64(sizeBytes[:])), maxChunk: t.cfg.MaxFrameSize, total: crc32.New(castagnoli)}
	if err := t.cfg.Snapshots.Receive(group, m, body); err != nil {
		return group, m, fmt.Errorf("store snapshot at index %d: %w", m.Snapshot.Metadata.Index, err)
	}
	if err := body.finish(); err != nil {
		return group, m, fmt.Errorf("store snapshot at index %d: %w", m.Snapshot.Metadata.Index, err)
	}
	t.counters.bytesReceived.Add(uint64(body.read))
	return group, m, nil
}
