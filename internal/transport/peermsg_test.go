package transport

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// manyIDs returns n distinct session ids spread over the whole uint64 range.
func manyIDs(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	return ids
}

// fullReport returns a status report of shards shards, every index as
// large as it gets in the last one.
func fullReport(shards int) StatusReport {
	r := StatusReport{Main: GroupStatus{Role: RoleLeader, Term: 7, Leader: 0xd3de779081154aa0, CommitIndex: 90, AppliedIndex: 88}}
	for i := range shards {
		g := GroupStatus{Role: MemberRole(1 + i%4), Term: uint64(i), Leader: uint64(i) * 3, CommitIndex: uint64(i) << 20, AppliedIndex: uint64(i) << 19}
		if i == shards-1 {
			g = GroupStatus{Role: RoleLearner, Term: math.MaxUint64, Leader: math.MaxUint64, CommitIndex: math.MaxUint64, AppliedIndex: math.MaxUint64}
		}
		r.Shards = append(r.Shards, ShardStatus{Shard: uint32(MaxReportShards - shards + i), GroupStatus: g})
	}
	return r
}

// TestPeerMessageRoundTrip encodes each kind of peer message and decodes it back.
func TestPeerMessageRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		message PeerMessage
	}{
		{name: "empty relay", message: SessionRelay{}},
		{name: "relay", message: SessionRelay{SessionIDs: []uint64{1, 300, math.MaxUint64}}},
		{name: "largest relay", message: SessionRelay{SessionIDs: manyIDs(MaxRelayIDs)}},
		{name: "relay ack", message: SessionRelayAck{}},
		{name: "removal notice", message: RemovalNotice{}},
		{name: "status report, one shard", message: fullReport(1)},
		{name: "status report of a follower without a leader", message: StatusReport{Main: GroupStatus{Role: RoleFollower}}},
		{name: "largest status report", message: fullReport(MaxReportShards)},
		{name: "quiesce", message: Quiesce{Group: 3, Term: 7, Commit: 1200}},
		{name: "quiesce, largest values", message: Quiesce{Group: MaxGroup, Term: math.MaxUint64, Commit: math.MaxUint64}},
		{name: "quiesce of the first group at term 0", message: Quiesce{Group: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame, err := appendPeerFrame([]byte("prefix"), tt.message)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			frame = frame[len("prefix"):]
			if got := int(binary.BigEndian.Uint32(frame) &^ peerFrameFlag); got != len(frame)-4 || got > maxPeerFrame {
				t.Fatalf("length word %d for a frame of %d bytes (limit %d)", got, len(frame), maxPeerFrame)
			}
			got, err := decodePeerMessage(frame[4:])
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.message) {
				t.Fatalf("decoded %#v, want %#v", got, tt.message)
			}
		})
	}
}

// TestPeerMessageTooLargeRefused: a relay over MaxRelayIDs is not encoded.
func TestPeerMessageTooLargeRefused(t *testing.T) {
	buf, err := appendPeerFrame([]byte("x"), SessionRelay{SessionIDs: manyIDs(MaxRelayIDs + 1)})
	if !errors.Is(err, errBadPeerMessage) || string(buf) != "x" {
		t.Fatalf("encode of %d ids: %q, %v; want the buffer untouched and errBadPeerMessage", MaxRelayIDs+1, buf, err)
	}
}

// TestStatusReportRefused: a status report that could not decode is not
// encoded: too many shards, a shard number out of range, no role.
func TestStatusReportRefused(t *testing.T) {
	tooMany := fullReport(MaxReportShards)
	tooMany.Shards = append(tooMany.Shards, tooMany.Shards[0])
	badShard := fullReport(1)
	badShard.Shards[0].Shard = MaxReportShards
	noShardRole := fullReport(2)
	noShardRole.Shards[1].Role = 0
	tests := []struct {
		name   string
		report StatusReport
	}{
		{name: "too many shards", report: tooMany},
		{name: "shard number out of range", report: badShard},
		{name: "no role", report: StatusReport{}},
		{name: "unknown role", report: StatusReport{Main: GroupStatus{Role: RoleLearner + 1}}},
		{name: "shard without a role", report: noShardRole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf, err := appendPeerFrame([]byte("x"), tt.report)
			if !errors.Is(err, errBadPeerMessage) || string(buf) != "x" {
				t.Fatalf("encode: %q, %v; want the buffer untouched and errBadPeerMessage", buf, err)
			}
		})
	}
}

// TestQuiesceRefused: a quiesce of a group id that could not decode (0, or
// over MaxGroup) is not encoded.
func TestQuiesceRefused(t *testing.T) {
	for _, group := range []uint64{0, MaxGroup + 1, math.MaxUint64} {
		buf, err := appendPeerFrame([]byte("x"), Quiesce{Group: group, Term: 1, Commit: 1})
		if !errors.Is(err, errBadPeerMessage) || string(buf) != "x" {
			t.Fatalf("encode of group %d: %q, %v; want the buffer untouched and errBadPeerMessage", group, buf, err)
		}
	}
}

// peerBody builds a peer frame body (checksum first) from version, type and fields.
func peerBody(version, typ byte, fields ...byte) []byte {
	body := append([]byte{0, 0, 0, 0, version, typ}, fields...)
	binary.BigEndian.PutUint32(body, crc32.Checksum(body[4:], castagnoli))
	return body
}

// TestDecodePeerMessageRejects: every malformed body is an errBadPeerMessage, never a panic.
func TestDecodePeerMessageRejects(t *testing.T) {
	badChecksum := peerBody(peerVersion, byte(peerSessionRelayAck))
	badChecksum[0] ^= 1
	tests := []struct {
		name string
		body []byte
	}{
		{name: "empty", body: nil},
		{name: "shorter than its header", body: []byte{1, 2, 3, 4, 5}},
		{name: "bad checksum", body: badChecksum},
		{name: "unknown version", body: peerBody(peerVersion+1, byte(peerSessionRelayAck))},
		{name: "unknown type", body: peerBody(peerVersion, 99)},
		{name: "type zero", body: peerBody(peerVersion, 0)},
		{name: "ack with trailing bytes", body: peerBody(peerVersion, byte(peerSessionRelayAck), 0)},
		{name: "notice with trailing bytes", body: peerBody(peerVersion, byte(peerRemovalNotice), 1, 2)},
		{name: "relay without count", body: peerBody(peerVersion, byte(peerSessionRelay))},
		{name: "relay count over the limit", body: peerBody(peerVersion, byte(peerSessionRelay), binary.AppendUvarint(nil, MaxRelayIDs+1)...)},
		{name: "relay count beyond uint64", body: peerBody(peerVersion, byte(peerSessionRelay), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{name: "relay missing ids", body: peerBody(peerVersion, byte(peerSessionRelay), 3, 1, 2)},
		{name: "relay truncated id", body: peerBody(peerVersion, byte(peerSessionRelay), 1, 0x80)},
		{name: "relay with trailing bytes", body: peerBody(peerVersion, byte(peerSessionRelay), 1, 7, 7)},
		{name: "report without fields", body: peerBody(peerVersion, byte(peerStatusReport))},
		{name: "report role zero", body: peerBody(peerVersion, byte(peerStatusReport), 0, 1, 1, 1, 1, 0)},
		{name: "report unknown role", body: peerBody(peerVersion, byte(peerStatusReport), 5, 1, 1, 1, 1, 0)},
		{name: "report truncated index", body: peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 0x80)},
		{name: "report without shard count", body: peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 1, 1)},
		{name: "report shard count over the limit", body: peerBody(peerVersion, byte(peerStatusReport), append([]byte{3, 1, 1, 1, 1}, binary.AppendUvarint(nil, MaxReportShards+1)...)...)},
		{name: "report missing shards", body: peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 1, 1, 2, 0, 1, 1, 1, 1, 1)},
		{name: "report shard number out of range", body: peerBody(peerVersion, byte(peerStatusReport), append(append([]byte{3, 1, 1, 1, 1, 1}, binary.AppendUvarint(nil, MaxReportShards)...), 1, 1, 1, 1, 1)...)},
		{name: "report shard without role", body: peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1)},
		{name: "report with trailing bytes", body: peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 1, 1, 0, 9)},
		{name: "quiesce without fields", body: peerBody(peerVersion, byte(peerQuiesce))},
		{name: "quiesce without commit", body: peerBody(peerVersion, byte(peerQuiesce), 2, 5)},
		{name: "quiesce truncated commit", body: peerBody(peerVersion, byte(peerQuiesce), 2, 5, 0x80)},
		{name: "quiesce of group 0", body: peerBody(peerVersion, byte(peerQuiesce), 0, 5, 9)},
		{name: "quiesce of a group over the limit", body: peerBody(peerVersion, byte(peerQuiesce), append(binary.AppendUvarint(nil, MaxGroup+1), 5, 9)...)},
		{name: "quiesce group beyond uint64", body: peerBody(peerVersion, byte(peerQuiesce), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 5, 9)},
		{name: "quiesce with trailing bytes", body: peerBody(peerVersion, byte(peerQuiesce), 2, 5, 9, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := decodePeerMessage(tt.body)
			if !errors.Is(err, errBadPeerMessage) || m != nil {
				t.Fatalf("decode: %#v, %v; want nil and errBadPeerMessage", m, err)
			}
		})
	}
}

// FuzzDecodePeerMessage: decoding never panics, and what decodes encodes
// back to a body that decodes to the same message.
func FuzzDecodePeerMessage(f *testing.F) {
	for _, m := range []PeerMessage{SessionRelay{}, SessionRelay{SessionIDs: []uint64{1, 1 << 40}}, SessionRelayAck{}, RemovalNotice{}, fullReport(3), Quiesce{Group: 2, Term: 3, Commit: 40}} {
		body, err := appendPeerMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Add(peerBody(peerVersion, byte(peerSessionRelay), 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodePeerMessage(body)
		if err != nil {
			if !errors.Is(err, errBadPeerMessage) || m != nil {
				t.Fatalf("decode error %v with message %#v", err, m)
			}
			return
		}
		again, err := appendPeerMessage(nil, m)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", m, err)
		}
		back, err := decodePeerMessage(again)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("re-decoded %#v, %v; want %#v", back, err, m)
		}
	})
}

// TestTCPPeerMessages sends peer messages interleaved with raft messages
// over TCP: each kind arrives, from its sender, in order, and raft's
// messages are unaffected.
func TestTCPPeerMessages(t *testing.T) {
	receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	connect(sender, receiver)
	sendUntilDelivered(t, sender, receiver, 1)
	want := []PeerMessage{
		SessionRelay{SessionIDs: []uint64{5, 6}},
		RemovalNotice{},
		SessionRelay{SessionIDs: manyIDs(MaxRelayIDs)},
		SessionRelayAck{},
		fullReport(MaxReportShards),
		Quiesce{Group: 4, Term: 9, Commit: 1 << 40},
		SessionRelay{},
	}
	for i, m := range want {
		sender.transport.SendPeer(2, m)
		sender.transport.Send(1, []raftpb.Message{app(1, 2, uint64(100+i), 1, 8)})
	}
	waitFor(t, 10*time.Second, "every message", func() bool {
		return len(receiver.handler.peerMessages()) == len(want) && receiver.handler.hasMessage(raftpb.MsgApp, uint64(100+len(want)-1))
	})
	for i, got := range receiver.handler.peerMessages() {
		if got.from != 1 || !reflect.DeepEqual(got.message, want[i]) {
			t.Fatalf("peer message %d: from %d %#v, want from 1 %#v", i, got.from, got.message, want[i])
		}
	}
	stats := receiver.transport.Stats()
	if stats.PeerMessagesReceived != uint64(len(want)) || stats.PeerFramesDropped != 0 || stats.FramesRejected != 0 || stats.MessagesMisaddressed != 0 {
		t.Fatalf("receiver stats %+v: want %d peer messages and nothing dropped or rejected", stats, len(want))
	}
	for i := range want {
		if !receiver.handler.hasMessage(raftpb.MsgApp, uint64(100+i)) {
			t.Fatalf("raft message %d sent between peer messages did not arrive", 100+i)
		}
	}
}

// TestTCPPeerMessageToUnknownPeer: a peer message to nobody, or too large
// to encode, is dropped and counted, and no group is told.
func TestTCPPeerMessageToUnknownPeer(t *testing.T) {
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	sender.transport.SendPeer(9, SessionRelayAck{})
	sender.transport.SendPeer(9, SessionRelay{SessionIDs: manyIDs(MaxRelayIDs + 1)})
	if dropped := sender.transport.Stats().MessagesDropped; dropped != 2 {
		t.Fatalf("%d messages dropped, want 2", dropped)
	}
	if n := sender.handler.unreachableCount(0, 9); n != 0 {
		t.Fatalf("group 0 told peer 9 is unreachable %d times; a peer message belongs to no group", n)
	}
}

// TestTCPDropsMalformedPeerFrame writes peer frames that do not decode
// between good frames on one connection: each bad one is dropped and
// counted, and the connection goes on delivering raft and peer messages.
func TestTCPDropsMalformedPeerFrame(t *testing.T) {
	receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
	conn := dialMessages(t, receiver.addr(), 1, 2, 7)
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, peerFrameFlag|uint32(len(body))), body...)
	}
	badChecksum := peerBody(peerVersion, byte(peerRemovalNotice))
	badChecksum[3] ^= 0x40
	good, err := appendPeerFrame(nil, SessionRelay{SessionIDs: []uint64{42}})
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	for _, bad := range [][]byte{
		badChecksum,
		peerBody(peerVersion, 77),
		peerBody(peerVersion+1, byte(peerSessionRelayAck)),
		peerBody(peerVersion, byte(peerSessionRelay), 2, 1),
		peerBody(peerVersion, byte(peerStatusReport), 3, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1),
	} {
		stream = append(stream, frame(bad)...)
	}
	stream = append(stream, mustFrame(t, app(1, 2, 7, 1, 8))...)
	stream = append(stream, good...)
	if _, err := conn.Write(stream); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the good frames after the bad ones", func() bool {
		return receiver.handler.hasMessage(raftpb.MsgApp, 7) && len(receiver.handler.peerMessages()) == 1
	})
	if got := receiver.handler.peerMessages()[0]; got.from != 1 || !reflect.DeepEqual(got.message, SessionRelay{SessionIDs: []uint64{42}}) {
		t.Fatalf("peer message from %d %#v, want the relay of 42 from 1", got.from, got.message)
	}
	if stats := receiver.transport.Stats(); stats.PeerFramesDropped != 5 || stats.FramesRejected != 0 {
		t.Fatalf("receiver stats %+v: want 5 peer frames dropped and no connection rejected", stats)
	}
}

// TestNetworkPeerMessages: on the fake network a peer message reaches its
// receiver with its sender's id, and partitions, cuts and removal stop it
// as they stop raft's messages.
func TestNetworkPeerMessages(t *testing.T) {
	network := NewNetwork(testSeed(t))
	defer network.Close()
	nodes := joinAll(network, 1, 2, 3)
	// sent sends relay id from -> to, then a raft message of index id on the
	// same link and waits for it: the relay was delivered or lost by then.
	sent := func(from, to uint64, id uint64) bool {
		nodes[from].transport.SendPeer(to, SessionRelay{SessionIDs: []uint64{id}})
		nodes[from].transport.Send(1, []raftpb.Message{app(from, to, id, 1, 8)})
		waitFor(t, 5*time.Second, "the raft message after the relay", func() bool { return nodes[to].handler.hasMessage(raftpb.MsgApp, id) })
		for _, got := range nodes[to].handler.peerMessages() {
			if relay, ok := got.message.(SessionRelay); ok && got.from == from && reflect.DeepEqual(relay.SessionIDs, []uint64{id}) {
				return true
			}
		}
		return false
	}
	tests := []struct {
		name      string
		fault     func()
		from, to  uint64
		delivered bool
	}{
		{name: "no fault", fault: func() {}, from: 1, to: 2, delivered: true},
		{name: "partition", fault: func() { network.Partition([]uint64{1}, []uint64{2, 3}) }, from: 1, to: 2},
		{name: "cut", fault: func() { network.Cut(3, 1) }, from: 3, to: 1},
		{name: "other direction of a cut", fault: func() { network.Cut(1, 3) }, from: 3, to: 1, delivered: true},
		{name: "isolated", fault: func() { network.Isolate(2) }, from: 3, to: 2},
		{name: "certain drop", fault: func() { network.SetDrop(2, 3, 1) }, from: 2, to: 3},
		{name: "removed peer", fault: func() { nodes[1].transport.RemovePeer(2) }, from: 1, to: 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fault()
			id := uint64(1000 + i)
			nodes[tt.from].transport.SendPeer(tt.to, SessionRelay{SessionIDs: []uint64{id}})
			network.Heal()
			for _, n := range nodes {
				for other := range nodes {
					n.transport.AddPeer(other, "")
				}
			}
			if got := sent(tt.from, tt.to, id+100); !got {
				t.Fatalf("a relay after healing did not arrive")
			}
			arrived := false
			for _, got := range nodes[tt.to].handler.peerMessages() {
				if relay, ok := got.message.(SessionRelay); ok && reflect.DeepEqual(relay.SessionIDs, []uint64{id}) {
					arrived = true
				}
			}
			if arrived != tt.delivered {
				t.Fatalf("relay %d -> %d under the fault arrived: %v, want %v", tt.from, tt.to, arrived, tt.delivered)
			}
		})
	}
}
