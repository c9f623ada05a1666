package transport

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

var seedFlag = flag.Int64("seed", 0, "seed for randomized tests; 0 picks one")

// testSeed returns -seed or a fresh seed, and logs it so a failure can be replayed.
func testSeed(t *testing.T) int64 {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Int64N(1 << 40)
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return seed
}

// fakeNode is a node on a fake Network.
type fakeNode struct {
	id        uint64
	transport Transport
	handler   *recorder
	snapshots *snapshotStore
}

func joinAll(network *Network, ids ...uint64) map[uint64]*fakeNode {
	nodes := make(map[uint64]*fakeNode)
	for _, id := range ids {
		nodes[id] = joinNode(network, id)
	}
	return nodes
}

func joinNode(network *Network, id uint64) *fakeNode {
	n := &fakeNode{id: id, handler: newRecorder(), snapshots: &snapshotStore{size: 4096}}
	n.transport = network.Join(id, n.handler, n.snapshots)
	return n
}

// marker is the index of the messages used to flush a link.
const marker = 1 << 60

// probe sends one MsgApp of index index on the link from -> to; a later
// flush tells whether it arrived.
func probe(t *testing.T, nodes map[uint64]*fakeNode, from, to uint64, index uint64) {
	t.Helper()
	nodes[from].transport.Send(1, []raftpb.Message{app(from, to, index, 1, 8)})
}

// flush sends a marker on from -> to and waits for it, so that every
// earlier message on the link has been delivered or dropped.
func flush(t *testing.T, nodes map[uint64]*fakeNode, from, to uint64) {
	t.Helper()
	index := uint64(marker) + from<<8 + to
	nodes[from].transport.Send(1, []raftpb.Message{app(from, to, index, 1, 8)})
	waitFor(t, 5*time.Second, fmt.Sprintf("marker %d -> %d", from, to), func() bool { return nodes[to].handler.hasMessage(raftpb.MsgApp, index) })
}

// TestNetworkFaults applies each fault, sends a probe on every link of a
// three-node network, heals, flushes every link, and checks which probes arrived.
func TestNetworkFaults(t *testing.T) {
	ids := []uint64{1, 2, 3}
	tests := []struct {
		name    string
		fault   func(*Network)
		blocked []link // links whose probe must not arrive; all others must
	}{
		{name: "none", fault: func(*Network) {}},
		{name: "partition 1 | 2 3", fault: func(n *Network) { n.Partition([]uint64{1}, []uint64{2, 3}) },
			blocked: []link{{1, 2}, {2, 1}, {1, 3}, {3, 1}}},
		{name: "partition 1 2 | 3", fault: func(n *Network) { n.Partition([]uint64{1, 2}, []uint64{3}) },
			blocked: []link{{1, 3}, {3, 1}, {2, 3}, {3, 2}}},
		{name: "one-way cut 1 -> 2", fault: func(n *Network) { n.Cut(1, 2) }, blocked: []link{{1, 2}}},
		{name: "isolate 3", fault: func(n *Network) { n.Isolate(3) }, blocked: []link{{1, 3}, {3, 1}, {2, 3}, {3, 2}}},
		{name: "drop everything 2 -> 3", fault: func(n *Network) { n.SetDrop(2, 3, 1) }, blocked: []link{{2, 3}}},
		{name: "delay 1 -> 3", fault: func(n *Network) { n.SetDelay(1, 3, 30*time.Millisecond) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			network := NewNetwork(1)
			defer network.Close()
			nodes := joinAll(network, ids...)
			tt.fault(network)
			for _, from := range ids {
				for _, to := range ids {
					if from != to {
						probe(t, nodes, from, to, 1)
					}
				}
			}
			network.Heal()
			for _, from := range ids {
				for _, to := range ids {
					if from == to {
						continue
					}
					flush(t, nodes, from, to)
					arrived := nodes[to].handler.hasMessage(raftpb.MsgApp, 1) && len(nodes[to].handler.from(from)) == 2
					if want := !slices.Contains(tt.blocked, link{from, to}); arrived != want {
						t.Errorf("link %d -> %d: probe arrived %v, want %v", from, to, arrived, want)
					}
				}
			}
		})
	}
}

// TestNetworkDelayKeepsOrder checks that a delayed link delivers no message
// before its delay and keeps the order of the messages.
func TestNetworkDelayKeepsOrder(t *testing.T) {
	const delay = 40 * time.Millisecond
	network := NewNetwork(1)
	defer network.Close()
	nodes := joinAll(network, 1, 2)
	network.SetDelay(1, 2, delay)
	sent := time.Now()
	for index := uint64(1); index <= 100; index++ {
		nodes[1].transport.Send(1, []raftpb.Message{app(1, 2, index, 1, 8)})
	}
	waitFor(t, 5*time.Second, "100 delayed messages", func() bool { return nodes[2].handler.count() == 100 })
	if elapsed := time.Since(sent); elapsed < delay {
		t.Fatalf("delivered after %v, before the delay of %v", elapsed, delay)
	}
	for i, r := range nodes[2].handler.from(1) {
		if r.message.Index != uint64(i+1) {
			t.Fatalf("message %d has index %d: order lost", i, r.message.Index)
		}
	}
}

// TestNetworkPartitionCutsMessagesInFlight checks that a message already
// sent on a delayed link is lost if a partition starts before it lands.
func TestNetworkPartitionCutsMessagesInFlight(t *testing.T) {
	network := NewNetwork(1)
	defer network.Close()
	nodes := joinAll(network, 1, 2)
	network.SetDelay(1, 2, 50*time.Millisecond)
	probe(t, nodes, 1, 2, 1)
	network.Partition([]uint64{1}, []uint64{2})
	waitFor(t, 5*time.Second, "the delayed message to be dropped at delivery", func() bool { return network.lostInFlight.Load() == 1 })
	network.Heal()
	flush(t, nodes, 1, 2)
	if nodes[2].handler.hasMessage(raftpb.MsgApp, 1) {
		t.Fatal("a message in flight crossed the partition")
	}
}

// TestNetworkDropRate checks that a drop probability drops about that share
// of messages, and that the same seed drops the same messages.
func TestNetworkDropRate(t *testing.T) {
	seed := testSeed(t)
	run := func() []uint64 {
		network := NewNetwork(seed)
		defer network.Close()
		nodes := joinAll(network, 1, 2)
		network.SetDrop(1, 2, 0.5)
		for index := uint64(1); index <= 1000; index++ {
			probe(t, nodes, 1, 2, index)
		}
		network.SetDrop(1, 2, 0)
		flush(t, nodes, 1, 2)
		var arrived []uint64
		for _, r := range nodes[2].handler.from(1) {
			arrived = append(arrived, r.message.Index)
		}
		return arrived[:len(arrived)-1]
	}
	first, second := run(), run()
	if len(first) < 400 || len(first) > 600 {
		t.Errorf("%d of 1000 messages arrived with drop probability 0.5", len(first))
	}
	if !slices.Equal(first, second) {
		t.Errorf("same seed, different drops: %d vs %d arrived", len(first), len(second))
	}
}

// TestNetworkLeaveAndRejoin checks that messages to a node that left are
// reported unreachable, and that a node joining again gets new messages on
// its new handler only.
func TestNetworkLeaveAndRejoin(t *testing.T) {
	network := NewNetwork(1)
	defer network.Close()
	nodes := joinAll(network, 1, 2)
	old := nodes[2]
	network.Leave(2)
	probe(t, nodes, 1, 2, 1)
	waitFor(t, 5*time.Second, "ReportUnreachable(1, 2)", func() bool { return nodes[1].handler.unreachableCount(1, 2) > 0 })
	old.transport.Send(1, []raftpb.Message{app(2, 1, 5, 1, 8)}) // a crashed node sends nothing
	nodes[2] = joinNode(network, 2)
	flush(t, nodes, 1, 2)
	flush(t, nodes, 2, 1)
	if old.handler.count() != 0 || nodes[2].handler.hasMessage(raftpb.MsgApp, 1) || nodes[1].handler.hasMessage(raftpb.MsgApp, 5) {
		t.Fatal("a message crossed a crash")
	}
	nodes[1].transport.RemovePeer(2)
	probe(t, nodes, 1, 2, 2)
	nodes[1].transport.AddPeer(2, "")
	flush(t, nodes, 1, 2)
	if nodes[2].handler.hasMessage(raftpb.MsgApp, 2) {
		t.Fatal("a message reached a removed peer")
	}
}

// TestNetworkSnapshots checks that a MsgSnap is stored then processed and
// reported finished, and that one lost to a fault is reported failed.
func TestNetworkSnapshots(t *testing.T) {
	tests := []struct {
		name   string
		fault  func(*Network)
		status raft.SnapshotStatus
	}{
		{name: "delivered", fault: func(*Network) {}, status: raft.SnapshotFinish},
		{name: "partitioned", fault: func(n *Network) { n.Partition([]uint64{1}, []uint64{2}) }, status: raft.SnapshotFailure},
		{name: "receiver left", fault: func(n *Network) { n.Leave(2) }, status: raft.SnapshotFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			network := NewNetwork(1)
			defer network.Close()
			nodes := joinAll(network, 1, 2)
			tt.fault(network)
			nodes[1].transport.Send(4, []raftpb.Message{snapshotMessage(1, 2, 77)})
			waitFor(t, 5*time.Second, "the snapshot report", func() bool { return len(nodes[1].handler.snapshotReports()) > 0 })
			if got := nodes[1].handler.snapshotReports(); len(got) != 1 || got[0] != (snapshotReport{group: 4, id: 2, status: tt.status}) {
				t.Fatalf("reports %+v, want one with status %v", got, tt.status)
			}
			stored := nodes[2].snapshots.receivedSnapshots()
			processed := nodes[2].handler.count()
			if tt.status == raft.SnapshotFinish {
				if len(stored) != 1 || stored[0].size != 4096 || stored[0].crc != generatorCRC(4096) || processed != 1 {
					t.Fatalf("stored %+v, processed %d: want the 4096-byte body stored and the MsgSnap processed", stored, processed)
				}
			} else if processed != 0 {
				t.Fatalf("processed %d messages after a lost snapshot", processed)
			}
		})
	}
}
