package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/sockio"
	"github.com/latch-io/latch/internal/timeline"
)

// acceptLoop accepts peer connections until the listener is closed.
func (t *TCP) acceptLoop() {
	backoff := 5 * time.Millisecond
	for {
		conn, err := t.listener.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			t.logger.Error("accept failed", "err", err)
			select {
			case <-time.After(backoff):
			case <-t.ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		conn = sockio.Wrap(conn) // frames read without the read(2) that finds none
		if !t.track(conn) {
			return
		}
		t.start(func() { t.serve(conn) })
	}
}

// serve runs one accepted connection: the handshake, then either a stream
// of messages or one snapshot.
func (t *TCP) serve(conn net.Conn) {
	defer t.untrack(conn)
	if !t.tlsHandshake(conn) {
		return
	}
	hello, ok := t.serverHandshake(conn)
	if !ok {
		return
	}
	reader := bufio.NewReaderSize(conn, 64<<10)
	switch hello.kind {
	case kindMessages:
		t.readMessages(conn, reader, hello.from)
	case kindSnapshot:
		t.receiveSnapshot(conn, reader, hello.from)
	}
}

// tlsHandshake completes the TLS handshake of an accepted connection, if
// it is one, within HandshakeTimeout, and reports whether it succeeded: a
// dialer without a certificate from the peer CA is refused here.
func (t *TCP) tlsHandshake(conn net.Conn) bool {
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		t.reject(conn, "TLS handshake refused", err)
		return false
	}
	return true
}

// serverHandshake reads the dialer's handshake, answers it, and reports
// whether the connection may be used.
func (t *TCP) serverHandshake(conn net.Conn) (handshake, bool) {
	conn.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	hello, err := readHandshake(conn)
	if err != nil {
		t.reject(conn, "bad handshake", err)
		return handshake{}, false
	}
	status := byte(statusOK)
	switch {
	case hello.version != protocolVersion || (hello.kind != kindMessages && hello.kind != kindSnapshot) || hello.from == 0:
		status = statusBadRequest
	case hello.cluster != t.cfg.ClusterID:
		status = statusCluster
	case hello.to != t.cfg.ID:
		status = statusWrongPeer
	case int(hello.shards) != t.cfg.Shards:
		status = statusShards
	}
	if _, err := conn.Write([]byte{status}); err != nil {
		t.logger.Debug("write handshake status", "remote", conn.RemoteAddr(), "err", err)
		return handshake{}, false
	}
	if status == statusShards {
		t.reject(conn, fmt.Sprintf("handshake refused: the peer runs with --shards %d, this member with --shards %d; every member of a cluster must run with the shard count it was created with",
			hello.shards, t.cfg.Shards), statusError(status), "peer", hello.from)
		return handshake{}, false
	}
	if status != statusOK {
		t.reject(conn, "handshake refused", statusError(status),
			"peer", hello.from, "cluster", hello.cluster, "to", hello.to, "version", hello.version, "kind", hello.kind)
		return handshake{}, false
	}
	conn.SetDeadline(time.Time{})
	return hello, true
}

// reject logs why an inbound connection is being closed and counts it.
func (t *TCP) reject(conn net.Conn, why string, err error, attrs ...any) {
	t.counters.framesRejected.Add(1)
	t.logger.Warn("closing peer connection: "+why, append([]any{"remote", conn.RemoteAddr(), "err", err}, attrs...)...)
}

// readMessages hands every frame on conn to the handler in order. It
// returns, and the caller closes conn, when the stream ends or breaks.
func (t *TCP) readMessages(conn net.Conn, reader *bufio.Reader, from uint64) {
	stream := t.replaceStream(from, conn)
	defer t.forgetStream(from, stream)
	frames := frameReader{reader: reader, maxFrame: t.cfg.MaxFrameSize}
	for {
		frame, err := frames.next()
		switch {
		case err == nil:
		case errors.Is(err, errBadPeerMessage):
			// One peer frame that does not decode is dropped; the stream,
			// which carries replication, stays up.
			t.counters.peerFramesDropped.Add(1)
			t.counters.bytesReceived.Add(uint64(frame.size))
			t.logger.Warn("dropping malformed peer message", "peer", from, "err", err)
			continue
		case errors.Is(err, ErrCorrupt), errors.Is(err, ErrFrameTooLarge):
			t.reject(conn, "corrupt stream", err, "peer", from)
			return
		case errors.Is(err, io.EOF) || t.ctx.Err() != nil:
			return
		default:
			t.logger.Debug("peer stream ended", "peer", from, "err", err)
			return
		}
		timeline.Mark(timeline.FrameRead)
		if frame.peer != nil {
			t.receivePeer(from, &frame)
			continue
		}
		t.receiveRaft(from, &frame)
	}
}

// receiveRaft hands a raft message read from peer from's connection to the
// handler, or drops it if raft cannot have sent it there.
func (t *TCP) receiveRaft(from uint64, frame *inboundFrame) {
	m, group := &frame.message, frame.group
	if why := t.misaddressed(m, from); why != "" {
		// One message raft cannot have sent on this connection is
		// dropped; the stream, which carries replication, stays up.
		t.counters.messagesMisaddressed.Add(1)
		t.logger.Warn("dropping misaddressed peer message: "+why, "peer", from, "type", m.Type, "from", m.From, "to", m.To)
		return
	}
	t.counters.messagesReceived.Add(1)
	t.counters.bytesReceived.Add(uint64(frame.size))
	if err := t.cfg.Handler.Process(t.ctx, group, *m); err != nil {
		t.logger.Debug("process failed", "peer", from, "group", group, "type", m.Type, "err", err)
	}
}

// receivePeer hands a peer message from peer from to the handler. Its
// sender is the connection's peer, as the handshake established.
func (t *TCP) receivePeer(from uint64, frame *inboundFrame) {
	m := frame.peer
	t.counters.peerMessagesReceived.Add(1)
	t.counters.bytesReceived.Add(uint64(frame.size))
	if err := t.cfg.Handler.ReceivePeer(t.ctx, from, m); err != nil {
		t.logger.Debug("peer message failed", "peer", from, "type", fmt.Sprintf("%T", m), "err", err)
	}
}

// misaddressed says why m, read from the message connection of peer from,
// cannot have been sent by raft on it, or returns "" if it can. Raft stamps
// its own id in From, with one exception: a follower forwards a leadership
// transfer request (MsgTransferLeader) to the leader with the transferee,
// not itself, in From (proposals and read-index requests it forwards carry
// its own id).
func (t *TCP) misaddressed(m *raftpb.Message, from uint64) string {
	switch {
	case m.To != t.cfg.ID:
		return "addressed to another node"
	case m.From != from && m.Type != raftpb.MsgTransferLeader:
		return "sender is not the connection's peer"
	}
	return ""
}

// inboundStream is a message connection being read.
type inboundStream struct {
	conn net.Conn
	done chan struct{} // closed when its reader stopped calling Process
}

// replaceStream records conn as from's message connection. A peer dials
// again only after its old connection failed, so the old one is closed, and
// its reader waited for, before the new one is read: messages from one peer
// are processed one at a time and in order.
func (t *TCP) replaceStream(from uint64, conn net.Conn) *inboundStream {
	stream := &inboundStream{conn: conn, done: make(chan struct{})}
	t.mu.Lock()
	old := t.streams[from]
	t.streams[from] = stream
	t.mu.Unlock()
	if old != nil {
		old.conn.Close()
		<-old.done
	}
	return stream
}

// forgetStream marks stream finished.
func (t *TCP) forgetStream(from uint64, stream *inboundStream) {
	t.mu.Lock()
	if t.streams[from] == stream {
		delete(t.streams, from)
	}
	t.mu.Unlock()
	close(stream.done)
}
