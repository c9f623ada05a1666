package raftnode

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/testkit/testseed"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// durableGroup is the file systems of a group's members, and what the
// durability checker found wrong.
type durableGroup struct {
	fss []*vfs.MemFS

	mu         sync.Mutex
	violations []string // guarded by mu
	checked    int      // guarded by mu: entries checked
}

// durableOn reports whether entry data would survive a crash of member i
// now: it is in what the WAL recovers from the synced bytes alone.
func (g *durableGroup) durableOn(i int, data []byte) bool {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, recovered, err := wal.Open(g.fss[i].CrashClone(vfs.CrashOptions{}), "/wal", wal.Options{SegmentSize: 64 << 10, Logger: quiet})
	if err != nil {
		return false
	}
	defer w.Close()
	if recovered[1] == nil {
		return false
	}
	for _, e := range recovered[1].Entries {
		if string(e.Data) == string(data) {
			return true
		}
	}
	return false
}

// check records a violation unless data is durable on member self and on a
// quorum: what applying it, and answering a client after, relies on.
func (g *durableGroup) check(self int, data []byte) {
	durable := 0
	local := false
	for i := range g.fss {
		if g.durableOn(i, data) {
			durable++
			local = local || i == self
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checked++
	if !local || durable <= len(g.fss)/2 {
		g.violations = append(g.violations, fmt.Sprintf("member %d applied %q durable on %d of %d members (locally: %v)", self+1, data, durable, len(g.fss), local))
	}
}

// durabilityMachine checks every entry it applies with its group's checker.
type durabilityMachine struct {
	recordingMachine
	self  int
	group *durableGroup
}

func (m *durabilityMachine) Apply(entries []raftpb.Entry) error {
	for _, e := range entries {
		if len(e.Data) > 0 {
			m.group.check(m.self, e.Data)
		}
	}
	return m.recordingMachine.Apply(entries)
}

// startDurableGroup starts a group of size members on the real clock (10 ms
// ticks), each with its own in-memory file system.
func startDurableGroup(t *testing.T, size int) (*durableGroup, []*Node, []*durabilityMachine) {
	t.Helper()
	group := &durableGroup{}
	network := transport.NewNetwork(1)
	t.Cleanup(network.Close)
	var nodes []*Node
	var machines []*durabilityMachine
	for i := range size {
		fs := vfs.NewMem()
		group.fss = append(group.fss, fs)
		machine := &durabilityMachine{self: i, group: group}
		nodes = append(nodes, startMember(t, member{network: network, id: uint64(i + 1), size: uint64(size), fs: fs, segmentSize: 64 << 10,
			config: Config{Machine: machine, Clock: clock.Real(), TickInterval: 10 * time.Millisecond}}))
		machines = append(machines, machine)
	}
	return group, nodes, machines
}

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized raftnode tests (0: $RAFTNODE_SEED or the clock)")

// groupLeader waits for a member that every member follows and returns its index.
func groupLeader(t *testing.T, nodes []*Node) int {
	t.Helper()
	leader := -1
	waitFor(t, "a leader every member follows", func() bool {
		lead := nodes[0].Status().Lead
		for _, n := range nodes {
			if n.Status().Lead != lead || lead == raft.None {
				return false
			}
		}
		leader = int(lead) - 1
		return nodes[leader].Status().RaftState == raft.StateLeader
	})
	return leader
}

// TestApplyOnlyAfterQuorumFsync: with appends saved asynchronously, an entry
// is applied on a member (and so answered to a client) only once it is
// durable on that member and on a quorum, whatever the fsyncs do: every
// apply is checked against crash clones of the three file systems. The
// followers' fsyncs are held while the leader's own completes (nothing may
// apply), then the leader's fsync is held while the followers' run (only a
// new leader may apply), and the rest runs with random fsync delays.
func TestApplyOnlyAfterQuorumFsync(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Pick(t, *seedFlag, "RAFTNODE_SEED"), 1))
	group, nodes, machines := startDurableGroup(t, 3)
	propose := func(data string) {
		t.Helper()
		for {
			leader := groupLeader(t, nodes)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := nodes[leader].Propose(ctx, []byte(data))
			cancel()
			if err == nil {
				return
			}
			t.Logf("propose %q: %v; retrying", data, err)
		}
	}
	applied := func(i int, data string) bool { return machines[i].has(data) }

	// Followers' fsyncs held: the leader's own save completes, nothing applies.
	leader := groupLeader(t, nodes)
	hold := make(chan struct{})
	var removes []func()
	var syncsBefore []int
	for i := range nodes {
		syncsBefore = append(syncsBefore, group.fss[i].Calls(vfs.OpSync))
		if i != leader {
			removes = append(removes, group.fss[i].Inject(vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Hold: hold}))
		}
	}
	propose("held-by-followers")
	for i := range nodes {
		if i != leader {
			waitFor(t, fmt.Sprintf("member %d's fsync to be held", i+1), func() bool { return group.fss[i].Calls(vfs.OpSync) > syncsBefore[i] })
		}
	}
	waitFor(t, "the leader's own fsync", func() bool { return group.durableOn(leader, []byte("held-by-followers")) })
	for i := range nodes {
		if applied(i, "held-by-followers") {
			t.Fatalf("member %d applied an entry only the leader has synced", i+1)
		}
	}
	close(hold)
	for _, remove := range removes {
		remove()
	}
	for i := range nodes {
		waitFor(t, fmt.Sprintf("member %d to apply the entry once synced", i+1), func() bool { return applied(i, "held-by-followers") })
	}

	// The leader's fsync held: the followers make a quorum, but the old
	// leader may not apply what it has not synced.
	leader = groupLeader(t, nodes)
	hold = make(chan struct{})
	before := group.fss[leader].Calls(vfs.OpSync)
	remove := group.fss[leader].Inject(vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Hold: hold})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := nodes[leader].Propose(ctx, []byte("held-by-leader")); err != nil {
		t.Fatalf("propose: %v", err)
	}
	cancel()
	waitFor(t, "the leader's fsync to be held", func() bool { return group.fss[leader].Calls(vfs.OpSync) > before })
	for i := range nodes {
		if i != leader {
			waitFor(t, fmt.Sprintf("member %d to apply the entry the followers synced", i+1), func() bool { return applied(i, "held-by-leader") })
		}
	}
	if applied(leader, "held-by-leader") {
		t.Fatalf("the old leader applied an entry its fsync has not finished")
	}
	close(hold)
	remove()
	waitFor(t, "the old leader to apply the entry once synced", func() bool { return applied(leader, "held-by-leader") })

	// Random fsync delays on every member.
	for i := range nodes {
		delay := time.Duration(rng.IntN(3000)) * time.Microsecond
		t.Logf("member %d: fsync delay %v", i+1, delay)
		defer group.fss[i].Inject(vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Delay: delay})()
	}
	const proposals = 30
	for p := range proposals {
		propose(fmt.Sprintf("delayed-%d", p))
	}
	for i := range nodes {
		waitFor(t, fmt.Sprintf("member %d to apply every proposal", i+1), func() bool { return applied(i, fmt.Sprintf("delayed-%d", proposals-1)) })
	}
	group.mu.Lock()
	defer group.mu.Unlock()
	for _, v := range group.violations {
		t.Error(v)
	}
	t.Logf("%d applies checked: %d applied before a quorum had synced them", group.checked, len(group.violations))
	if group.checked < 3*(proposals+2) {
		t.Fatalf("only %d applies checked, want at least %d", group.checked, 3*(proposals+2))
	}
}
