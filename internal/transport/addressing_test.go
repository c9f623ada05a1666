package transport

import (
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// TestTCPForwardedTransferKeepsStream sends, on one message connection
// from node 1 to node 2, what raft sends (including a leadership transfer
// request that node 1, a follower, forwards with the transferee 3 in From)
// and messages raft never sends on it. The forwarded transfer is delivered;
// each misaddressed message is dropped and counted alone; the stream stays
// up and delivers what follows; no connection is rejected.
func TestTCPForwardedTransferKeepsStream(t *testing.T) {
	tests := []struct {
		name      string
		message   raftpb.Message
		delivered bool
	}{
		{name: "heartbeat from the peer", message: raftpb.Message{Type: raftpb.MsgHeartbeat, From: 1, To: 2, Term: 1}, delivered: true},
		{name: "transfer forwarded for transferee 3", message: raftpb.Message{Type: raftpb.MsgTransferLeader, From: 3, To: 2, Term: 1}, delivered: true},
		{name: "proposal forwarded by the peer", message: raftpb.Message{Type: raftpb.MsgProp, From: 1, To: 2, Entries: []raftpb.Entry{{Data: []byte("x")}}}, delivered: true},
		{name: "heartbeat claiming another sender", message: raftpb.Message{Type: raftpb.MsgHeartbeat, From: 5, To: 2, Term: 1}},
		{name: "proposal claiming another sender", message: raftpb.Message{Type: raftpb.MsgProp, From: 3, To: 2}},
		{name: "append addressed to another node", message: raftpb.Message{Type: raftpb.MsgApp, From: 1, To: 9, Term: 1}},
		{name: "transfer addressed to another node", message: raftpb.Message{Type: raftpb.MsgTransferLeader, From: 3, To: 9, Term: 1}},
	}
	receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
	conn := dialMessages(t, receiver.addr(), 1, 2, 7)
	wantDelivered, wantDropped := 0, uint64(0)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.message
			m.Index = uint64(100 + i) // tells the messages apart
			if _, err := conn.Write(mustFrame(t, m)); err != nil {
				t.Fatalf("stream closed before this message: %v", err)
			}
			// A marker from the peer after each message shows the stream is
			// still read and that the message before it was handled.
			marker := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 1, To: 2, Term: 1, Index: uint64(1000 + i)}
			if _, err := conn.Write(mustFrame(t, marker)); err != nil {
				t.Fatalf("stream closed after this message: %v", err)
			}
			waitFor(t, 10*time.Second, "the marker behind the message", func() bool {
				return receiver.handler.hasMessage(raftpb.MsgHeartbeat, marker.Index)
			})
			wantDelivered++ // the marker
			if tt.delivered {
				wantDelivered++
			} else {
				wantDropped++
			}
			if got := receiver.handler.hasMessage(m.Type, m.Index); got != tt.delivered {
				t.Errorf("message delivered %v, want %v", got, tt.delivered)
			}
			stats := receiver.transport.Stats()
			if stats.FramesRejected != 0 || stats.MessagesMisaddressed != wantDropped || stats.MessagesReceived != uint64(wantDelivered) {
				t.Errorf("stats %+v: want 0 frames rejected, %d misaddressed, %d received", stats, wantDropped, wantDelivered)
			}
		})
	}
}

// TestTCPForwardsTransferBetweenTransports has node 1 send node 2, through
// its transport, the MsgTransferLeader raft's follower forwards (From: the
// transferee 3), then an append: both arrive, nothing is rejected.
func TestTCPForwardsTransferBetweenTransports(t *testing.T) {
	follower := startNode(t, 1, 7, "127.0.0.1:0", nil)
	leader := startNode(t, 2, 7, "127.0.0.1:0", nil)
	connect(follower, leader)
	follower.transport.Send(1, []raftpb.Message{
		{Type: raftpb.MsgTransferLeader, From: 3, To: 2, Term: 4, Index: 1},
		app(1, 2, 2, 1, 8),
	})
	waitFor(t, 10*time.Second, "the transfer request and the append", func() bool {
		return leader.handler.hasMessage(raftpb.MsgTransferLeader, 1) && leader.handler.hasMessage(raftpb.MsgApp, 2)
	})
	if stats := leader.transport.Stats(); stats.FramesRejected != 0 || stats.MessagesMisaddressed != 0 {
		t.Fatalf("leader stats %+v: want nothing rejected", stats)
	}
}

// dialMessages opens a message connection from id from to id to and
// completes the handshake.
func dialMessages(t *testing.T, addr string, from, to, cluster uint64) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hello := handshake{version: protocolVersion, kind: kindMessages, shards: 1, cluster: cluster, from: from, to: to}
	if _, err := conn.Write(hello.encode()); err != nil {
		t.Fatal(err)
	}
	var status [1]byte
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(status[:]); err != nil || status[0] != statusOK {
		t.Fatalf("handshake: status %d, %v", status[0], err)
	}
	conn.SetReadDeadline(time.Time{})
	return conn
}
