package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/freeport"
)

// TestTCPDeliversInOrder has three transports send to each other
// concurrently and checks every message arrives once, in order, with its group.
func TestTCPDeliversInOrder(t *testing.T) {
	const perPeer = 2000
	nodes := []*node{startNode(t, 1, 7, "127.0.0.1:0", nil), startNode(t, 2, 7, "127.0.0.1:0", nil), startNode(t, 3, 7, "127.0.0.1:0", nil)}
	connect(nodes...)
	done := make(chan struct{})
	for _, sender := range nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			for index := uint64(1); index <= perPeer; index += 10 {
				var batch []raftpb.Message
				for i := range uint64(10) {
					for _, receiver := range nodes {
						if receiver != sender {
							batch = append(batch, app(sender.id, receiver.id, index+i, 2, 16))
						}
					}
				}
				sender.transport.Send(index%3+1, batch)
			}
		}()
	}
	for range nodes {
		<-done
	}
	for _, receiver := range nodes {
		waitFor(t, 20*time.Second, "every message delivered", func() bool { return receiver.handler.count() == 2*perPeer })
		for _, sender := range nodes {
			if sender == receiver {
				continue
			}
			got := receiver.handler.from(sender.id)
			if len(got) != perPeer {
				t.Fatalf("node %d got %d messages from %d, want %d", receiver.id, len(got), sender.id, perPeer)
			}
			for i, r := range got {
				want := uint64(i + 1)
				if r.message.Index != want || r.message.To != receiver.id || len(r.message.Entries) != 2 {
					t.Fatalf("node %d: message %d from %d is index %d to %d with %d entries, want index %d",
						receiver.id, i, sender.id, r.message.Index, r.message.To, len(r.message.Entries), want)
				}
				if wantGroup := (want-1)/10*10 + 1; r.group != wantGroup%3+1 {
					t.Fatalf("node %d: message %d from %d has group %d, want %d", receiver.id, i, sender.id, r.group, wantGroup%3+1)
				}
			}
		}
	}
	for _, n := range nodes {
		stats := n.transport.Stats()
		if stats.MessagesSent != 2*perPeer || stats.MessagesDropped != 0 || stats.MessagesReceived != 2*perPeer {
			t.Errorf("node %d stats %+v: want %d sent and received, none dropped", n.id, stats, 2*perPeer)
		}
	}
}

// TestTCPDeadPeer checks that Send to a peer that does not answer returns
// at once and reports it unreachable, and that the peer gets messages again
// once it is back, and after it restarts.
func TestTCPDeadPeer(t *testing.T) {
	addr := freeport.Addr(t)
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	sender.transport.AddPeer(2, addr)

	start := time.Now()
	for index := range uint64(20000) {
		sender.transport.Send(1, []raftpb.Message{app(1, 2, index, 1, 8)})
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("20000 sends to a dead peer took %v", elapsed)
	}
	waitFor(t, 5*time.Second, "ReportUnreachable(1, 2), drops and failed dials", func() bool {
		stats := sender.transport.Stats()
		return sender.handler.unreachableCount(1, 2) > 0 && stats.MessagesDropped > 0 && stats.ConnectionsFailed > 0
	})

	for round := range 2 {
		receiver := startNode(t, 2, 7, addr, nil)
		index := uint64(1_000_000 * (round + 1))
		sendUntilDelivered(t, sender, receiver, index)
		receiver.transport.Close()
		before := sender.handler.unreachableCount(1, 2)
		waitFor(t, 5*time.Second, "ReportUnreachable after the peer closed", func() bool {
			sender.transport.Send(1, []raftpb.Message{app(1, 2, 1, 1, 8)})
			return sender.handler.unreachableCount(1, 2) > before
		})
	}
}

// sendUntilDelivered sends MsgApps with increasing indexes from index on
// until one reaches receiver.
func sendUntilDelivered(t *testing.T, sender, receiver *node, index uint64) {
	t.Helper()
	first := index
	waitFor(t, 10*time.Second, "a message delivered to the restarted peer", func() bool {
		sender.transport.Send(1, []raftpb.Message{app(sender.id, receiver.id, index, 1, 8)})
		index++
		return receiver.handler.count() > 0
	})
	got := receiver.handler.from(sender.id)
	for i := 1; i < len(got); i++ {
		if got[i].message.Index <= got[i-1].message.Index || got[0].message.Index < first {
			t.Fatalf("out of order after reconnect: index %d after %d", got[i].message.Index, got[i-1].message.Index)
		}
	}
}

// TestTCPRefusesWrongCluster checks that peers of another cluster, or a
// dialer expecting another node id, are refused at the handshake.
func TestTCPRefusesWrongCluster(t *testing.T) {
	tests := []struct {
		name          string
		senderCluster uint64
		peerID        uint64 // the id the sender believes the receiver has
	}{
		{name: "cluster id mismatch", senderCluster: 8, peerID: 2},
		{name: "wrong node id", senderCluster: 7, peerID: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
			sender := startNode(t, 1, tt.senderCluster, "127.0.0.1:0", nil)
			sender.transport.AddPeer(tt.peerID, receiver.addr())
			waitFor(t, 5*time.Second, "the sender to see the peer as unreachable", func() bool {
				sender.transport.Send(1, []raftpb.Message{app(1, tt.peerID, 1, 1, 8)})
				return sender.handler.unreachableCount(1, tt.peerID) > 0 && receiver.transport.Stats().FramesRejected > 0
			})
			if n := receiver.handler.count(); n != 0 {
				t.Fatalf("receiver processed %d messages from a refused peer", n)
			}
		})
	}
}

// TestTCPSurvivesGarbage writes malformed input to the peer port and checks
// that each connection is closed, counted, and that the transport still works.
func TestTCPSurvivesGarbage(t *testing.T) {
	hello := handshake{version: protocolVersion, kind: kindMessages, shards: 1, cluster: 7, from: 1, to: 2}.encode()
	frameHeader := func(length uint32) []byte {
		b := binary.BigEndian.AppendUint32(append([]byte(nil), hello...), length)
		return binary.BigEndian.AppendUint64(b, 1)
	}
	valid, err := appendFrame(nil, 1, &raftpb.Message{Type: raftpb.MsgHeartbeat, From: 1, To: 2})
	if err != nil {
		t.Fatal(err)
	}
	peerHeader := func(length uint32) []byte {
		return binary.BigEndian.AppendUint32(append([]byte(nil), hello...), peerFrameFlag|length)
	}
	notice, err := appendPeerFrame(nil, RemovalNotice{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input []byte
	}{
		{name: "random bytes", input: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n and then some more bytes")},
		{name: "bad version", input: append(append([]byte(nil), hello[:4]...), append([]byte{99}, hello[5:]...)...)},
		{name: "oversized frame", input: frameHeader(1 << 31)},
		{name: "frame shorter than its group", input: frameHeader(3)},
		{name: "garbage message", input: append(frameHeader(8+6), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)},
		{name: "snapshot stream without MsgSnap", input: append(handshake{version: protocolVersion, kind: kindSnapshot, shards: 1, cluster: 7, from: 1, to: 2}.encode(), valid...)},
		{name: "oversized raft frame", input: frameHeader(1<<31 - 1)},
		{name: "peer frame shorter than its header", input: append(peerHeader(peerHeaderSize-1), 1, 2, 3, 4, 5)},
		{name: "oversized peer frame", input: peerHeader(maxPeerFrame + 1)},
		{name: "snapshot stream opened by a peer frame", input: append(handshake{version: protocolVersion, kind: kindSnapshot, shards: 1, cluster: 7, from: 1, to: 2}.encode(), notice...)},
		{name: "protocol version 1", input: handshake{version: 1, kind: kindMessages, cluster: 7, from: 1, to: 2}.encode()},
	}
	receiver := startNode(t, 2, 7, "127.0.0.1:0", func(cfg *Config) { cfg.MaxFrameSize = 1 << 20 })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejected := receiver.transport.Stats().FramesRejected
			conn, err := net.Dial("tcp", receiver.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(tt.input)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, conn) // the status byte or verdict, then EOF when the server closes
			if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				t.Fatalf("server did not close the connection: %v", err)
			}
			waitFor(t, 5*time.Second, "the rejection to be counted", func() bool {
				return receiver.transport.Stats().FramesRejected > rejected
			})
		})
	}
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	sender.transport.AddPeer(2, receiver.addr())
	sendUntilDelivered(t, sender, receiver, 1)
}

func mustFrame(t *testing.T, m raftpb.Message) []byte {
	t.Helper()
	frame, err := appendFrame(nil, 1, &m)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// isReset reports whether err is a connection reset, which a server closing
// with unread input may cause.
func isReset(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr)
}

// TestTCPMessageSizes checks that a message larger than the frame reader's
// step arrives intact and that one over MaxFrameSize is dropped at the
// sender and reported, without breaking the connection.
func TestTCPMessageSizes(t *testing.T) {
	tune := func(cfg *Config) { cfg.MaxFrameSize = 4 << 20 }
	sender := startNode(t, 1, 7, "127.0.0.1:0", tune)
	receiver := startNode(t, 2, 7, "127.0.0.1:0", tune)
	connect(sender, receiver)
	big := app(1, 2, 1, 1, 3<<20)
	for i := range big.Entries[0].Data {
		big.Entries[0].Data[i] = byte(i * 31)
	}
	sender.transport.Send(1, []raftpb.Message{big, app(1, 2, 2, 1, 5<<20), app(1, 2, 3, 1, 8)})
	waitFor(t, 10*time.Second, "the messages around the oversized one", func() bool { return receiver.handler.count() == 2 })
	got := receiver.handler.from(1)
	if got[0].message.Index != 1 || !bytes.Equal(got[0].message.Entries[0].Data, big.Entries[0].Data) || got[1].message.Index != 3 {
		t.Fatalf("got indexes %d and %d (first intact: %v), want 1 intact then 3",
			got[0].message.Index, got[1].message.Index, bytes.Equal(got[0].message.Entries[0].Data, big.Entries[0].Data))
	}
	waitFor(t, 5*time.Second, "ReportUnreachable for the oversized message", func() bool { return sender.handler.unreachableCount(1, 2) > 0 })
}

// TestTCPSnapshotToUnknownPeer checks that a MsgSnap to a peer never added
// still ends in SnapshotFailure.
func TestTCPSnapshotToUnknownPeer(t *testing.T) {
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	sender.transport.Send(2, []raftpb.Message{snapshotMessage(1, 9, 3)})
	waitFor(t, 5*time.Second, "the snapshot report", func() bool { return len(sender.handler.snapshotReports()) > 0 })
	if got := sender.handler.snapshotReports(); got[0] != (snapshotReport{group: 2, id: 9, status: raft.SnapshotFailure}) {
		t.Fatalf("reports %+v, want SnapshotFailure for group 2 peer 9", got)
	}
}

// TestTCPSlowPeer checks that Send never waits for a peer that accepts
// connections but does not answer the handshake, or whose handler stopped
// reading: messages beyond the queue are dropped and reported.
func TestTCPSlowPeer(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T) string // returns the slow peer's address
	}{
		{name: "handshake never answered", start: func(t *testing.T) string {
			listener, err := net.Listen("tcp", "127.0.0.1:0") // the kernel completes the TCP handshake; nobody reads
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { listener.Close() })
			return listener.Addr().String()
		}},
		{name: "handler blocked", start: func(t *testing.T) string {
			receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
			receiver.handler.block = make(chan struct{})
			t.Cleanup(func() { close(receiver.handler.block) })
			return receiver.addr()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sender := startNode(t, 1, 7, "127.0.0.1:0", func(cfg *Config) { cfg.QueueSize = 256 })
			sender.transport.AddPeer(2, tt.start(t))
			sent := make(chan time.Duration)
			go func() {
				start := time.Now()
				for index := range uint64(20000) {
					sender.transport.Send(1, []raftpb.Message{app(1, 2, index, 1, 1024)})
				}
				sent <- time.Since(start)
			}()
			select {
			case elapsed := <-sent:
				t.Logf("20000 sends took %v", elapsed)
			case <-time.After(20 * time.Second):
				t.Fatal("Send blocked on a slow peer")
			}
			waitFor(t, 5*time.Second, "ReportUnreachable(1, 2)", func() bool { return sender.handler.unreachableCount(1, 2) > 0 })
			if stats := sender.transport.Stats(); stats.MessagesDropped == 0 {
				t.Fatalf("stats %+v: nothing dropped", stats)
			}
		})
	}
}

func TestDialAddress(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "host and port", in: "127.0.0.1:7101", want: "127.0.0.1:7101"},
		{name: "tcp URL", in: "tcp://127.0.0.1:7101", want: "127.0.0.1:7101"},
		{name: "http URL", in: "http://node1:7101/", want: "node1:7101"},
		{name: "unparsable kept", in: "::bad://", want: "::bad://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dialAddress(tt.in); got != tt.want {
				t.Fatalf("dialAddress(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestTCPPeerMovesAndLeaves checks that AddPeer with a new address moves
// the stream to it, and that after RemovePeer messages are dropped and reported.
func TestTCPPeerMovesAndLeaves(t *testing.T) {
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	before := startNode(t, 2, 7, "127.0.0.1:0", nil)
	sender.transport.AddPeer(2, before.addr())
	sendUntilDelivered(t, sender, before, 1)
	sender.transport.AddPeer(2, before.addr()) // idempotent: the stream stays

	after := startNode(t, 2, 7, "127.0.0.1:0", nil)
	sender.transport.AddPeer(2, after.addr())
	sendUntilDelivered(t, sender, after, 1000)

	sender.transport.RemovePeer(2) // returns once the peer's queue is dropped
	dropped := sender.transport.Stats().MessagesDropped
	sender.transport.Send(1, []raftpb.Message{app(1, 2, 5000, 1, 8)})
	if got := sender.transport.Stats().MessagesDropped; got != dropped+1 {
		t.Fatalf("%d messages dropped by a Send to a removed peer, want 1", got-dropped)
	}
	waitFor(t, 5*time.Second, "ReportUnreachable for a removed peer", func() bool { return sender.handler.unreachableCount(1, 2) > 0 })
}
