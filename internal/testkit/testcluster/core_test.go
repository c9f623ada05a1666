package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// The core scenarios of issue 3: election, replication, a killed leader, a
// minority partition, restart from WAL and snapshot, catch-up by snapshot.
// Each ends with EnsureSame: replicas at equal index have equal state hashes.

// raftCompactionLag is raftnode's default CompactionLag for a snapshot every
// 50 entries (min(5000, SnapshotEvery/2)): after a snapshot at index S the
// raft log keeps entries from S-raftCompactionLag on.
const raftCompactionLag = 25

// writers put unique keys through random nodes from several goroutines and
// remember every acknowledged write (checker D).
type writers struct {
	prefix string
	urls   []string
	stop   chan struct{}
	once   sync.Once // closes stop
	wg     sync.WaitGroup

	mu      sync.Mutex        // guards acked and maxIndex
	acked   map[string]string // path -> value, for acknowledged writes only
	maxIdx  uint64            // highest index of an acknowledged write
	count   atomic.Int64      // acknowledged writes
	unknown atomic.Int64      // writes with an unknown outcome
}

// startWriters starts n goroutines writing under prefix until halted,
// through random nodes among targets (every node if none given).
func startWriters(c *Cluster, prefix string, n int, targets ...int) *writers {
	if len(targets) == 0 {
		targets = c.Others()
	}
	var urls []string
	for _, i := range targets {
		urls = append(urls, c.URL(i))
	}
	w := &writers{prefix: prefix, urls: urls, stop: make(chan struct{}), acked: map[string]string{}}
	for g := range n {
		w.wg.Add(1)
		go w.run(g)
	}
	return w
}

func (w *writers) run(g int) {
	defer w.wg.Done()
	random := rand.New(rand.NewPCG(uint64(g), 7))
	for seq := 0; ; seq++ {
		select {
		case <-w.stop:
			return
		default:
		}
		path := fmt.Sprintf("%s/w%d-%d", w.prefix, g, seq)
		value := fmt.Sprintf("value-%d-%d", g, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		node, err := Put(ctx, w.urls[random.IntN(len(w.urls))], path, value, "")
		cancel()
		if err != nil {
			w.unknown.Add(1)
			if errors.Is(err, syscall.ECONNREFUSED) {
				time.Sleep(5 * time.Millisecond) // a crashed node: try another soon
			}
			continue
		}
		w.mu.Lock()
		w.acked[path] = value
		w.maxIdx = max(w.maxIdx, node.Index)
		w.mu.Unlock()
		w.count.Add(1)
	}
}

// halt stops the writers and waits for them; it may be called again.
func (w *writers) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// waitCount waits until at least n writes were acknowledged.
func (w *writers) waitCount(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	if !waitFor(timeout, func() bool { return w.count.Load() >= n }) {
		t.Fatalf("only %d of %d writes acknowledged within %v (%d failed)", w.count.Load(), n, timeout, w.unknown.Load())
	}
}

// verify checks that every acknowledged write is on every running node.
func (w *writers) verify(t *testing.T, c *Cluster) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	c.WaitApplied(w.maxIdx, 20*time.Second)
	lost := 0
	for _, i := range c.Running() {
		for path, value := range w.acked {
			n, err := c.LocalGet(i, path)
			if err != nil || n.Value != value {
				if lost < 10 {
					t.Errorf("acknowledged write %s=%q: on %s got %q, %v", path, value, c.Nodes[i].Name, n.Value, err)
				}
				lost++
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d acknowledged writes missing (of %d on %d nodes)", lost, len(w.acked), len(c.Running()))
	}
	t.Logf("D: %d acknowledged writes present on %d nodes (up to index %d; %d writes failed or unknown)",
		len(w.acked), len(c.Running()), w.maxIdx, w.unknown.Load())
}

func checkOneLeader(t *testing.T, c *Cluster, leader int) {
	t.Helper()
	ok := waitFor(10*time.Second, func() bool {
		for _, i := range c.Running() {
			st := c.Status(i)
			if (st.Role == "leader") != (i == leader) || c.Nodes[i].statusLeader() != c.Nodes[leader].ID {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("nodes do not all follow %s alone: %s", c.Nodes[leader].Name, c.describe())
	}
}

// TestElection: a cluster elects one leader that all follow; isolating it
// makes the rest elect another in a higher term while the old one steps down
// (CheckQuorum); after healing, all follow one leader and writes work.
func TestElection(t *testing.T) {
	c := New(t, 3, Options{})
	leader := c.WaitLeader(10 * time.Second)
	checkOneLeader(t, c, leader)
	oldTerm := c.Status(leader).Term

	c.Net.Isolate(c.Nodes[leader].ID)
	next := c.LeaderIn(10*time.Second, c.Others(leader)...)
	if next == leader {
		t.Fatalf("isolated %s still leads the others", c.Nodes[leader].Name)
	}
	if term := c.Status(next).Term; term <= oldTerm {
		t.Fatalf("new leader %s has term %d, not above %d", c.Nodes[next].Name, term, oldTerm)
	}
	if !waitFor(10*time.Second, func() bool { return c.Status(leader).Role != "leader" }) {
		t.Fatalf("isolated old leader %s never stepped down: %s", c.Nodes[leader].Name, c.describe())
	}

	c.Net.Heal()
	final := c.WaitLeader(10 * time.Second)
	checkOneLeader(t, c, final)
	ctx := ctxT(t, 30*time.Second)
	if _, err := Put(ctx, c.URL(leader), "/election/after-heal", "x", ""); err != nil {
		t.Fatalf("write through the old leader after healing: %v", err)
	}
	c.EnsureSame(10 * time.Second)
}

// TestReplicationToEveryReplica: writes through any node reach every
// replica's own state (read locally, stale), with equal versions and indexes.
func TestReplicationToEveryReplica(t *testing.T) {
	c := New(t, 5, Options{})
	ctx := ctxT(t, 60*time.Second)
	var last uint64
	for k := range 25 {
		n, err := Put(ctx, c.URL(k%5), fmt.Sprintf("/rep/k%d", k%7), fmt.Sprintf("v%d", k), "")
		if err != nil {
			t.Fatalf("put %d through n%d: %v", k, k%5+1, err)
		}
		last = n.Index
	}
	c.WaitApplied(last, 10*time.Second)
	want := map[string]api.Node{}
	for k := range 7 {
		path := fmt.Sprintf("/rep/k%d", k)
		for i := range c.Nodes {
			n, err := Get(ctx, c.URL(i), path, api.Stale)
			if err != nil {
				t.Fatalf("stale get %s on n%d: %v", path, i+1, err)
			}
			if prev, ok := want[path]; ok && (n.Value != prev.Value || n.Version != prev.Version || n.ModifiedIndex != prev.ModifiedIndex) {
				t.Fatalf("%s differs: n%d has %+v, another node %+v", path, i+1, n, prev)
			}
			want[path] = n
		}
	}
	if n := want["/rep/k3"]; n.Value != "v24" || n.Version != 4 {
		t.Fatalf("/rep/k3 = %+v, want v24 at version 4", n)
	}
	c.EnsureSame(10 * time.Second)
}

// TestLeaderCrashLosesNoAckedWrite: under a steady write load the leader
// loses power (unsynced data gone); the others elect a new leader and keep
// accepting writes; the old leader restarts; every acknowledged write is on
// every replica.
func TestLeaderCrashLosesNoAckedWrite(t *testing.T) {
	c := New(t, 3, Options{})
	w := startWriters(c, "/crash", 8)
	defer w.halt()
	w.waitCount(t, 50, 30*time.Second)

	leader := c.WaitLeader(10 * time.Second)
	c.Crash(leader)
	next := c.LeaderIn(10*time.Second, c.Others(leader)...)
	if next == leader {
		t.Fatalf("crashed node still leader")
	}
	before := w.count.Load()
	w.waitCount(t, before+50, 30*time.Second)

	c.Restart(leader)
	w.waitCount(t, w.count.Load()+20, 30*time.Second)
	w.halt()
	w.verify(t, c)
	c.EnsureSame(10 * time.Second)
}

// TestMinorityCommitsNothing: with the old leader and one follower cut off
// from the other three, the minority commits nothing: its writes fail with
// 503 unavailable, its linearizable reads fail with 503, its stale reads
// answer from old state. The majority moves on, and after healing the
// minority's refused writes are nowhere.
func TestMinorityCommitsNothing(t *testing.T) {
	c := New(t, 5, Options{RequestTimeout: time.Second})
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(10 * time.Second)
	before, err := Put(ctx, c.URL(leader), "/m", "before", "")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(before.Index, 10*time.Second)
	c.EnsureSame(10 * time.Second)

	minority := []int{leader, (leader + 1) % 5}
	majority := c.Others(minority...)
	c.Net.Partition(c.IDs(minority...), c.IDs(majority...))
	newLeader := c.LeaderIn(10*time.Second, majority...)
	// What the minority may still learn is what the old leader had
	// committed when it stepped down (an entry a majority acknowledged
	// before the cut, such as a member's announcement, can commit just
	// after it, and the follower with it hears of it by the old leader's
	// last heartbeats). Once no member of the minority leads, nothing can
	// raise its commit index past the highest one there.
	stepped := WaitFor(10*time.Second, func() bool {
		for _, i := range minority {
			if c.Status(i).Role == "leader" {
				return false
			}
		}
		return true
	})
	if !stepped {
		t.Fatalf("the cut-off leader %s did not step down: %s", c.Nodes[leader].Name, c.describe())
	}
	var cutOffCommit uint64
	for _, i := range minority {
		cutOffCommit = max(cutOffCommit, c.Status(i).CommitIndex)
	}

	for _, i := range minority {
		name := c.Nodes[i].Name
		_, err := Put(ctx, c.URL(i), "/m", "minority-"+name, "")
		if api.CodeOf(err) != api.CodeUnavailable {
			t.Fatalf("write on minority %s: err %v, want 503 unavailable", name, err)
		}
		_, err = Get(ctx, c.URL(i), "/m", api.Linearizable)
		if api.CodeOf(err) != api.CodeUnavailable {
			t.Fatalf("linearizable read on minority %s: err %v, want 503 unavailable", name, err)
		}
		n, err := Get(ctx, c.URL(i), "/m", api.Stale)
		if err != nil || n.Value != "before" {
			t.Fatalf("stale read on minority %s: %+v, %v; want the old value", name, n, err)
		}
	}
	after, err := Put(ctx, c.URL(majority[0]), "/m", "after", "")
	if err != nil {
		t.Fatalf("write on the majority (leader %s): %v", c.Nodes[newLeader].Name, err)
	}
	for _, i := range minority {
		if got := c.Status(i).CommitIndex; got > cutOffCommit {
			t.Fatalf("minority %s moved its commit index to %d while cut off, past %d, the old leader's when it stepped down", c.Nodes[i].Name, got, cutOffCommit)
		}
		if n, err := Get(ctx, c.URL(i), "/m", api.Stale); err != nil || n.Value != "before" {
			t.Fatalf("minority %s shows %+v, %v while cut off", c.Nodes[i].Name, n, err)
		}
	}

	c.Net.Heal()
	c.WaitLeader(10 * time.Second)
	c.WaitApplied(after.Index, 10*time.Second)
	for i := range c.Nodes {
		n, err := Get(ctx, c.URL(i), "/m", api.Linearizable)
		if err != nil || n.Value != "after" || n.Version != 2 {
			t.Fatalf("after healing, n%d reads %+v, %v; want \"after\" at version 2 (no minority write applied)", i+1, n, err)
		}
	}
	c.EnsureSame(10 * time.Second)
}

// TestRestartFromWALAndSnapshot: with a snapshot every 50 entries, the whole
// cluster stops cleanly and restarts, then loses power and restarts; every
// acknowledged write survives both, recovered from snapshot plus WAL tail.
func TestRestartFromWALAndSnapshot(t *testing.T) {
	c := New(t, 3, Options{SnapshotEvery: 50})
	var all []*writers
	for _, round := range []struct {
		name string
		down func(i int)
	}{
		{"clean stop", c.Stop},
		{"power loss", c.Crash},
	} {
		w := startWriters(c, "/restart/"+fmt.Sprint(len(all)), 8)
		w.waitCount(t, 150, 60*time.Second)
		w.halt()
		all = append(all, w)
		if !waitFor(20*time.Second, func() bool {
			for i := range c.Nodes {
				if len(c.SnapshotIndexes(i)) == 0 {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: not every node took a snapshot after %d writes", round.name, w.count.Load())
		}
		c.EnsureSame(10 * time.Second)
		for i := range c.Nodes {
			round.down(i)
		}
		for i := range c.Nodes {
			c.Restart(i)
		}
		c.WaitLeader(10 * time.Second)
		for _, w := range all {
			w.verify(t, c)
		}
		c.EnsureSame(10 * time.Second)
		t.Logf("%s: restarted with snapshots %v, %v, %v", round.name, c.SnapshotIndexes(0), c.SnapshotIndexes(1), c.SnapshotIndexes(2))
	}
}

// TestFarBehindCaughtUpBySnapshot: a follower is cut off while more entries
// commit than every other node's log still holds (snapshot every 50, log
// compacted raftCompactionLag behind it), so the leader can only catch it up
// with a snapshot; it does, and the replicas end identical.
func TestFarBehindCaughtUpBySnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("writes over 5,000 entries")
	}
	c := New(t, 3, Options{SnapshotEvery: 50})
	leader := c.WaitLeader(10 * time.Second)
	lag := (leader + 1) % 3
	ctx := ctxT(t, 120*time.Second)
	first, err := Put(ctx, c.URL(leader), "/far/first", "x", "")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(first.Index, 10*time.Second)
	behind := c.Nodes[lag].Server.AppliedIndex()
	c.Net.Isolate(c.Nodes[lag].ID)

	w := startWriters(c, "/far", 32, c.Others(lag)...)
	defer w.halt()
	compactedPast := func() bool {
		for _, i := range c.Others(lag) {
			snaps := c.SnapshotIndexes(i)
			if len(snaps) == 0 || snaps[len(snaps)-1] <= behind+raftCompactionLag+1 {
				return false
			}
		}
		return true
	}
	if !waitFor(90*time.Second, compactedPast) {
		t.Fatalf("logs not compacted past index %d after %d writes: snapshots %v", behind, w.count.Load(), c.SnapshotIndexes(leader))
	}
	w.halt()
	if got := c.Nodes[lag].Server.AppliedIndex(); got != behind {
		t.Fatalf("isolated %s applied %d, want still %d", c.Nodes[lag].Name, got, behind)
	}

	c.Net.Heal()
	w.verify(t, c) // waits for every node, the lagging one included, to apply
	c.EnsureSame(20 * time.Second)
	t.Logf("%s caught up from index %d past compacted logs (snapshots there now %v)", c.Nodes[lag].Name, behind, c.SnapshotIndexes(lag))
}
