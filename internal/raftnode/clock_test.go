package raftnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// recordingMachine remembers the data of the normal entries applied.
type recordingMachine struct {
	nopMachine
	mu      sync.Mutex
	applied [][]byte // guarded by mu
	// beforeApply, if set, is called with the entries before they are
	// recorded (a test holds the Ready loop busy in it).
	beforeApply atomic.Pointer[func([]raftpb.Entry)]
}

func (m *recordingMachine) Apply(entries []raftpb.Entry) error {
	if f := m.beforeApply.Load(); f != nil {
		(*f)(entries)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		if len(e.Data) > 0 {
			m.applied = append(m.applied, e.Data)
		}
	}
	return nil
}

func (m *recordingMachine) has(data string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.applied {
		if string(d) == data {
			return true
		}
	}
	return false
}

// stepHandler hands a peer's messages to its node once it started.
type stepHandler struct{ node atomic.Pointer[Node] }

func (h *stepHandler) Process(ctx context.Context, _ uint64, m raftpb.Message) error {
	if n := h.node.Load(); n != nil {
		return n.Step(ctx, m)
	}
	return nil
}

func (h *stepHandler) ReportUnreachable(_, id uint64) {
	if n := h.node.Load(); n != nil {
		n.ReportUnreachable(id)
	}
}

func (h *stepHandler) ReportSnapshot(_, id uint64, status raft.SnapshotStatus) {
	if n := h.node.Load(); n != nil {
		n.ReportSnapshot(id, status)
	}
}

// ReceivePeer hands a leader's Quiesce to the node, as the server does, and
// ignores every other typed peer message.
func (h *stepHandler) ReceivePeer(_ context.Context, from uint64, m transport.PeerMessage) error {
	if q, ok := m.(transport.Quiesce); ok {
		if n := h.node.Load(); n != nil {
			n.Quiesce(from, q.Term, q.Commit)
		}
	}
	return nil
}

// waitFor polls cond until it holds or 10 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// member says how startMember starts one member of a test group.
type member struct {
	network     *transport.Network
	id, size    uint64 // member id among ids 1 to size
	fs          vfs.FS // its WAL and snapshots
	segmentSize int64  // of its WAL
	// config has the node's Machine, Clock, TickInterval and any other
	// setting; startMember fills in the rest.
	config Config
	// wrap, if set, wraps the member's transport (to watch what it sends).
	wrap func(transport.Transport) transport.Transport
}

// startMember starts m's node. It is stopped at cleanup, before its WAL closes.
func startMember(t *testing.T, m member) *Node {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, recovered, err := wal.Open(m.fs, "/wal", wal.Options{SegmentSize: m.segmentSize, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	snaps, err := snap.New(m.fs, "/snap", snap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	handler := &stepHandler{}
	cfg := m.config
	cfg.ID, cfg.Group, cfg.Recovered, cfg.Logger = m.id, 1, recovered[1], quiet
	cfg.WAL, cfg.Snapshots, cfg.Transport = w, snaps, m.network.Join(m.id, handler, nil)
	if m.wrap != nil {
		cfg.Transport = m.wrap(cfg.Transport)
	}
	for peer := uint64(1); peer <= m.size; peer++ {
		cfg.Peers = append(cfg.Peers, raft.Peer{ID: peer})
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	handler.node.Store(n)
	t.Cleanup(n.Stop)
	return n
}

// fakeGroup is a group of nodes over the in-memory network, all ticking on
// one fake clock.
type fakeGroup struct {
	clock    *clock.Fake
	network  *transport.Network
	nodes    []*Node
	machines []*recordingMachine
}

const fakeTick = 100 * time.Millisecond

func startFakeGroup(t *testing.T, size int) *fakeGroup {
	t.Helper()
	return startFakeGroupWith(t, size, fakeOptions{})
}

// fakeOptions are the settings of a fakeGroup beyond its size.
type fakeOptions struct {
	quiesce bool                                          // Config.Quiesce
	wrap    func(transport.Transport) transport.Transport // member.wrap
}

func startFakeGroupWith(t *testing.T, size int, opts fakeOptions) *fakeGroup {
	t.Helper()
	g := &fakeGroup{clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	g.network = transport.NewNetwork(1)
	t.Cleanup(g.network.Close)
	for id := uint64(1); id <= uint64(size); id++ {
		machine := &recordingMachine{}
		g.nodes = append(g.nodes, startMember(t, member{network: g.network, id: id, size: uint64(size), fs: vfs.NewMem(), segmentSize: 1 << 20,
			config: Config{Machine: machine, Clock: g.clock, TickInterval: fakeTick, Quiesce: opts.quiesce}, wrap: opts.wrap}))
		g.machines = append(g.machines, machine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.clock.BlockUntil(ctx, size); err != nil {
		t.Fatalf("the nodes' tickers: %v", err)
	}
	return g
}

// tick advances the clock by one tick interval and waits until every node's
// Ready loop has ticked raft at that reading.
func (g *fakeGroup) tick(t *testing.T) {
	t.Helper()
	g.clock.Advance(fakeTick)
	now := g.clock.Now()
	for i, n := range g.nodes {
		waitFor(t, fmt.Sprintf("node %d to tick at %v", i+1, now), func() bool { return !n.LastTick().Before(now) })
	}
}

// leader returns the node every member agrees leads, or nil.
func (g *fakeGroup) leader() *Node {
	lead := g.nodes[0].Status().Lead
	for _, n := range g.nodes {
		if n.Status().Lead != lead {
			return nil
		}
	}
	for _, n := range g.nodes {
		if n.cfg.ID == lead && n.Status().RaftState == raft.StateLeader {
			return n
		}
	}
	return nil
}

// TestElectAndCommitOnFakeClock: raft's clock is the injected one. No node
// campaigns before an election timeout of advanced time, however long the
// test takes in real time; stepping ticks elects a leader, which commits a
// proposal on every member.
func TestElectAndCommitOnFakeClock(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{"one node", 1},
		{"three nodes", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startFakeGroup(t, tt.size)
			electionTicks := g.nodes[0].cfg.ElectionTicks
			for range electionTicks - 1 {
				g.tick(t)
			}
			for i, n := range g.nodes {
				if st := n.Status(); st.Lead != raft.None || st.Term > 1 {
					t.Fatalf("node %d: leader %d, term %d after %d ticks, before any election timeout", i+1, st.Lead, st.Term, electionTicks-1)
				}
			}
			// A lone node wins its first election, at its randomized timeout
			// (under two election timeouts); three may need a few rounds.
			budget := 2 * electionTicks
			if tt.size > 1 {
				budget = 50 * electionTicks
			}
			ticks := electionTicks - 1
			var leader *Node
			for leader = g.leader(); leader == nil; leader = g.leader() {
				if ticks++; ticks > budget {
					t.Fatalf("no leader after %d ticks", budget)
				}
				g.tick(t)
			}
			if got := g.clock.Since(leader.LastTick()); got != 0 {
				t.Errorf("the leader's LastTick is %v behind the fake clock, want 0", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := leader.Propose(ctx, []byte("x")); err != nil {
				t.Fatalf("propose: %v", err)
			}
			for i, m := range g.machines {
				waitFor(t, fmt.Sprintf("node %d to apply the proposal", i+1), func() bool { return m.has("x") })
			}
		})
	}
}
