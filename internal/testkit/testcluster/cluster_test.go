package testcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/vfs"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestReplication writes through every node (followers forward) and reads
// the writes back, linearizably, from every node.
func TestReplication(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	for i := range c.Nodes {
		path := fmt.Sprintf("/r/k%d", i)
		n, err := Put(ctx, c.URL(i), path, fmt.Sprintf("v%d", i), "none")
		if err != nil {
			t.Fatalf("put %s through n%d: %v", path, i+1, err)
		}
		if n.Version != 1 || n.Index == 0 {
			t.Fatalf("put %s: got %+v, want version 1 and an index", path, n)
		}
	}
	for i := range c.Nodes {
		for j := range c.Nodes {
			path := fmt.Sprintf("/r/k%d", j)
			n, err := Get(ctx, c.URL(i), path, api.Linearizable)
			if err != nil {
				t.Fatalf("get %s from n%d: %v", path, i+1, err)
			}
			if n.Value != fmt.Sprintf("v%d", j) {
				t.Fatalf("get %s from n%d = %q", path, i+1, n.Value)
			}
		}
	}
	c.EnsureSame(10 * time.Second)
}

// TestPreconditions checks prev_version none, N and a mismatch.
func TestPreconditions(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	url := c.URL(c.WaitLeader(5 * time.Second))
	if _, err := Put(ctx, url, "/p", "a", "none"); err != nil {
		t.Fatal(err)
	}
	_, err := Put(ctx, url, "/p", "b", "none")
	if api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("second create with prev_version=none: err %v, want precondition_failed", err)
	}
	if _, err := Put(ctx, url, "/p", "c", "1"); err != nil {
		t.Fatalf("CAS at version 1: %v", err)
	}
	if _, err := Put(ctx, url, "/p", "d", "1"); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("stale CAS: err %v, want precondition_failed", err)
	}
	n, err := Get(ctx, url, "/p", api.Linearizable)
	if err != nil || n.Value != "c" || n.Version != 2 {
		t.Fatalf("get after CAS: %+v, %v", n, err)
	}
}

// createSession creates a session through node url, failing the test if it cannot.
func createSession(t *testing.T, ctx context.Context, url string, timeout time.Duration) api.Session {
	t.Helper()
	s, err := CreateSession(ctx, url, timeout)
	if err != nil {
		t.Fatalf("create session through %s: %v", url, err)
	}
	return s
}

// TestLockQueue checks acquire/release through different nodes: the first
// session holds, the second queues and gets it with a larger token once the
// first releases; acquire is idempotent per session.
func TestLockQueue(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	a := createSession(t, ctx, c.URL(0), 10*time.Second).SessionID
	b := createSession(t, ctx, c.URL(1), 10*time.Second).SessionID
	la, err := acquireLock(ctx, c.URL(0), "R", a, 0)
	if err != nil || !la.Held || la.FencingToken == 0 {
		t.Fatalf("first acquire: %+v, %v", la, err)
	}
	again, err := acquireLock(ctx, c.URL(2), "R", a, 0)
	if err != nil || again.FencingToken != la.FencingToken || again.Path != la.Path {
		t.Fatalf("acquire again by the holder: %+v, %v; want the same place %+v", again, err, la)
	}
	if _, err := acquireLock(ctx, c.URL(1), "R", b, 50*time.Millisecond); api.CodeOf(err) != api.CodeLockNotHeld {
		t.Fatalf("second session acquire: err %v, want lock_not_held", err)
	}
	got := make(chan api.Lock, 1)
	go func() {
		l, err := acquireLock(ctx, c.URL(1), "R", b, 10*time.Second)
		if err != nil {
			t.Errorf("waiting acquire: %v", err)
		}
		got <- l
	}()
	var released api.Released
	if err := Do(ctx, "POST", c.URL(2), "/v1/lock/release", nil, api.LockRequest{Name: "R", SessionID: a, FencingToken: la.FencingToken}, &released); err != nil {
		t.Fatalf("release: %v", err)
	}
	lb := <-got
	if !lb.Held || lb.FencingToken <= la.FencingToken || lb.SessionHandle != sessionHandle(t, b) {
		t.Fatalf("second holder %+v: want held with token > %d", lb, la.FencingToken)
	}
	var st api.LockState
	if err := Do(ctx, "GET", c.URL(0), "/v1/lock/R", nil, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Holder == nil || st.Holder.SessionHandle != sessionHandle(t, b) || st.Holder.FencingToken != lb.FencingToken || st.Waiters != 0 {
		t.Fatalf("lock state %+v, want holder handle %s with token %d", st, sessionHandle(t, b), lb.FencingToken)
	}
	c.EnsureSame(10 * time.Second)
}

// TestSessionExpiryReleasesLock: a session that stops heartbeating loses its
// lock, on every replica, and the waiter behind it gets a larger token. It
// runs in virtual time.
func TestSessionExpiryReleasesLock(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{MinSessionTTL: 200 * time.Millisecond}))
	ctx := ctxT(t, 30*time.Second)
	a := createSession(t, ctx, c.URL(0), 300*time.Millisecond).SessionID
	created := c.Now()
	b := createSession(t, ctx, c.URL(1), 20*time.Second).SessionID
	var la, lb api.Lock
	if err := Do(ctx, "POST", c.URL(0), "/v1/lock/acquire", nil, api.LockRequest{Name: "E", SessionID: a}, &la); err != nil || !la.Held || la.FencingToken == 0 {
		t.Fatalf("a's acquire: %+v, %v; want held with a token", la, err)
	}
	// b waits; a never heartbeats, so it expires once its 300ms timeout
	// has passed on the clock.
	waited := make(chan error, 1)
	go func() {
		waited <- Do(ctx, "POST", c.URL(1), "/v1/lock/acquire", nil, api.LockRequest{Name: "E", SessionID: b, WaitMs: 15000}, &lb)
	}()
	var err error
	if !c.AdvanceUntil(20*time.Second, func() bool { return received(waited, &err) }) {
		t.Fatalf("the waiter still waits %v after a's session was created: %s", c.Now().Sub(created), c.describe())
	}
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if !lb.Held || lb.FencingToken <= la.FencingToken {
		t.Fatalf("after expiry the waiter got %+v, want held with token > %d", lb, la.FencingToken)
	}
	// A heartbeat is answered from the receiving member's applied state, so
	// ask node 2 once it has applied the expiry that handed b the lock.
	c.WaitApplied(lb.Index, 10*time.Second)
	err = Do(ctx, "POST", c.URL(2), "/v1/session/heartbeat", nil, api.SessionRequest{SessionID: a}, nil)
	if api.CodeOf(err) != api.CodeSessionExpired {
		t.Fatalf("heartbeat of the expired session: %v, want session_expired", err)
	}
	c.EnsureSame(10 * time.Second)
}

// received reports whether ch has a value, storing it in out.
func received[T any](ch <-chan T, out *T) bool {
	select {
	case *out = <-ch:
		return true
	default:
		return false
	}
}

// nextEvents returns the next n events of stream, failing the test if it
// ends or timeout passes first.
func nextEvents(t *testing.T, stream *EventStream, n int, timeout time.Duration) []api.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []api.Event
	for len(out) < n {
		ev, ok := stream.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("%d of %d events before the stream ended or %v passed (reason %q): %+v", len(out), n, timeout, stream.Reason(), out)
		}
		out = append(out, ev)
	}
	return out
}

// TestWatchOnFollower registers watches on a follower and checks the events
// it fires at apply time: one-shot fires once, recursive persistent fires for
// every change under it, all in index order.
func TestWatchOnFollower(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := (leader + 1) % 3
	url := c.URL(follower)
	session := createSession(t, ctx, url, 10*time.Second).SessionID
	stream := openStream(t, url, session) // watches are accepted only where the session's stream is
	var w1, w2 api.Watch
	if err := Do(ctx, "POST", url, "/v1/watch", nil, api.WatchRequest{Path: "/w/x", SessionID: session}, &w1); err != nil {
		t.Fatal(err)
	}
	if err := Do(ctx, "POST", url, "/v1/watch", nil, api.WatchRequest{Path: "/w", Recursive: true, Persistent: true, SessionID: session}, &w2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/w/x", "/w/x", "/w/y"} {
		if _, err := Put(ctx, c.URL(leader), p, "v", ""); err != nil {
			t.Fatal(err)
		}
	}
	events := nextEvents(t, stream, 6, 20*time.Second)
	var oneShot int
	for i, ev := range events {
		if i > 0 && ev.Index < events[i-1].Index {
			t.Fatalf("events out of index order: %+v", events)
		}
		if ev.WatchID == w1.WatchID {
			oneShot++
		}
	}
	// /w/x created (one-shot fires, recursive fires CREATED + CHILDREN_CHANGED on /w),
	// /w/x changed (recursive), /w/y created (recursive CREATED + CHILDREN_CHANGED).
	if oneShot != 1 || len(events) != 6 {
		t.Fatalf("got %d events (%d from the one-shot watch): %+v", len(events), oneShot, events)
	}
}

// TestMembershipChanges adds a learner under writes (it catches up by
// snapshot), reads linearizably through it, promotes it, transfers
// leadership to it, removes the old leader, and checks the survivors agree.
func TestMembershipChanges(t *testing.T) {
	c := New(t, 3, Options{SnapshotEvery: 20})
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	var last api.Node
	for i := range 60 {
		n, err := Put(ctx, c.URL(leader), fmt.Sprintf("/m/k%d", i%7), fmt.Sprint(i), "")
		if err != nil {
			t.Fatal(err)
		}
		last = n
	}
	var added api.Member
	err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members", nil,
		map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "learner": true}, &added)
	if err != nil || !added.Learner {
		t.Fatalf("add learner: %+v, %v", added, err)
	}
	n4 := c.AddNode("n4")
	c.WaitApplied(last.Index, 20*time.Second)
	if st := c.Status(n4); st.Role != "learner" {
		t.Fatalf("n4 role %q, want learner", st.Role)
	}
	if snaps := c.SnapshotIndexes(n4); len(snaps) == 0 {
		t.Fatalf("n4 caught up without a snapshot (log compacted at every 20 entries)")
	}
	got, err := Get(ctx, c.URL(n4), "/m/k3", api.Linearizable)
	if err != nil || got.Value != "59" { // the last of the 60 acknowledged writes to /m/k3 (59%7 == 3)
		t.Fatalf("linearizable read through the learner: %+v, %v; want 59", got, err)
	}
	// A voter cannot be removed while a quorum would not remain... promote first.
	var promoted api.Member
	if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members/n4/promote", nil, nil, &promoted); err != nil || promoted.Learner {
		t.Fatalf("promote n4: %+v, %v", promoted, err)
	}
	if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/leader", nil, api.LeaderTransferRequest{To: "n4"}, nil); err != nil {
		t.Fatalf("transfer leadership to n4: %v", err)
	}
	if l := c.WaitLeader(10 * time.Second); l != n4 {
		t.Fatalf("leader is %s after transfer, want n4", c.Nodes[l].Name)
	}
	old := c.Nodes[leader].Name
	if err := Do(ctx, "DELETE", c.URL(n4), "/v1/cluster/members/"+old, nil, nil, nil); err != nil {
		t.Fatalf("remove %s: %v", old, err)
	}
	if !waitFor(10*time.Second, func() bool { return c.Nodes[leader].Server.Err() != nil }) {
		t.Fatalf("removed member %s did not stop", old)
	}
	c.Stop(leader)
	after, err := Put(ctx, c.URL(n4), "/m/after", "x", "")
	if err != nil {
		t.Fatalf("write after the membership changes: %v", err)
	}
	c.WaitApplied(after.Index, 10*time.Second)
	var members api.Members
	if err := Do(ctx, "GET", c.URL(n4), "/v1/cluster/members", nil, nil, &members); err != nil || len(members.Members) != 3 {
		t.Fatalf("members %+v, %v; want 3", members, err)
	}
	c.EnsureSame(10 * time.Second)
}

// TestRemovalRefusedWithoutQuorum: with one of three voters down, removing
// another voter would leave one healthy voter of two: refused.
func TestRemovalRefusedWithoutQuorum(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	down, other := (leader+1)%3, (leader+2)%3
	downID := c.Nodes[down].ID
	c.Stop(down)
	if !waitFor(10*time.Second, func() bool { return !c.Nodes[leader].Server.PeerHealthy(downID) }) {
		t.Fatalf("leader still counts stopped %s as healthy", c.Nodes[down].Name)
	}
	err := Do(ctx, "DELETE", c.URL(leader), "/v1/cluster/members/"+c.Nodes[other].Name, nil, nil, nil)
	if api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("removing %s with %s down: %v, want precondition_failed", c.Nodes[other].Name, c.Nodes[down].Name, err)
	}
	if _, err := Put(ctx, c.URL(leader), "/still", "writable", ""); err != nil {
		t.Fatalf("cluster not writable after the refused removal: %v", err)
	}
}

// putKeys writes n keys prefix/k0, prefix/k1, ... through url and returns
// their paths, failing the test unless every write is acknowledged.
func putKeys(t *testing.T, ctx context.Context, url, prefix string, n int) []string {
	t.Helper()
	var paths []string
	for i := range n {
		path := fmt.Sprintf("%s/k%d", prefix, i)
		if _, err := Put(ctx, url, path, "v", ""); err != nil {
			t.Fatalf("put %s: %v", path, err)
		}
		paths = append(paths, path)
	}
	return paths
}

// TestPlantedNoSyncLosesWrites is the durability checker's planted bug:
// with the WAL acknowledging before fsync, a power loss of every node loses
// acknowledged writes, and the check that every acknowledged write survives
// must see it. Without the bug the same scenario loses nothing.
func TestPlantedNoSyncLosesWrites(t *testing.T) {
	for _, planted := range []bool{false, true} {
		t.Run(fmt.Sprintf("planted=%v", planted), func(t *testing.T) {
			c := New(t, 3, Options{UnsafeNoSync: planted})
			ctx := ctxT(t, 60*time.Second)
			leader := c.WaitLeader(5 * time.Second)
			acked := putKeys(t, ctx, c.URL(leader), "/durable", 20)
			for i := range c.Nodes {
				c.Crash(i)
			}
			for i := range c.Nodes {
				c.Restart(i)
			}
			leader = c.WaitLeader(20 * time.Second)
			lost := 0
			for _, path := range acked {
				if _, err := Get(ctx, c.URL(leader), path, api.Linearizable); err != nil {
					lost++
				}
			}
			switch {
			case !planted && lost > 0:
				t.Fatalf("%d of %d acknowledged writes lost after a power loss", lost, len(acked))
			case planted && lost == 0:
				t.Fatalf("with the WAL acknowledging before fsync, the check found no lost write")
			}
			t.Logf("acknowledged writes lost: %d of %d", lost, len(acked))
		})
	}
}

// TestFsyncErrorStopsServer: an fsync that fails on the leader stops that
// server (never retried), the others elect a new leader, and nothing that
// was acknowledged is lost.
func TestFsyncErrorStopsServer(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	acked := putKeys(t, ctx, c.URL(leader), "/fsync", 10)
	c.Nodes[leader].FS.Inject(vfs.Fault{Ops: vfs.OpSync, Err: syscall.EIO})
	_, err := Put(ctx, c.URL(leader), "/fsync/after", "v", "")
	if err == nil {
		// The write may commit on the followers' fsyncs; it must not be
		// acknowledged by the failed leader unless a quorum has it.
		t.Logf("write during the failure acknowledged (committed by the followers)")
	}
	if !waitFor(10*time.Second, func() bool { return c.Nodes[leader].Server.Err() != nil }) {
		t.Fatalf("leader kept running after an fsync error")
	}
	t.Logf("leader stopped with: %v", c.Nodes[leader].Server.Err())
	c.Net.Leave(c.Nodes[leader].ID)
	survivor := c.Others(leader)[0]
	newLeader := c.LeaderIn(10*time.Second, c.Others(leader)...)
	for _, p := range acked {
		if _, err := Get(ctx, c.URL(survivor), p, api.Linearizable); err != nil {
			t.Fatalf("acknowledged %s missing after the leader's fsync failure (new leader %s): %v", p, c.Nodes[newLeader].Name, err)
		}
	}
}

// TestRemovedWhileCutOffStops: a member removed while it was cut off never
// receives the commit of its removal; when it comes back, the members that
// applied it tell it so when it campaigns, and it stops.
func TestRemovedWhileCutOffStops(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	gone, stays := c.Others(leader)[0], c.Others(leader)[1]
	// The removal is refused while the leader does not yet count the member
	// that stays as replicating (just after the election it probes it):
	// removing gone would then leave too few healthy voters.
	if !waitFor(10*time.Second, func() bool { return c.Nodes[leader].Server.PeerHealthy(c.Nodes[stays].ID) }) {
		t.Fatalf("the leader never counted %s healthy", c.Nodes[stays].Name)
	}
	c.Net.Isolate(c.Nodes[gone].ID)
	if err := Do(ctx, "DELETE", c.URL(leader), "/v1/cluster/members/"+c.Nodes[gone].Name, nil, nil, nil); err != nil {
		t.Fatalf("remove %s while it is cut off: %v", c.Nodes[gone].Name, err)
	}
	if err := c.Nodes[gone].Server.Err(); err != nil {
		t.Fatalf("%s stopped while cut off (%v): it cannot have learned of its removal", c.Nodes[gone].Name, err)
	}
	c.Net.Heal()
	if !waitFor(15*time.Second, func() bool { return errors.Is(c.Nodes[gone].Server.Err(), server.ErrRemoved) }) {
		t.Fatalf("%s, removed while cut off, still runs after the partition healed: %v", c.Nodes[gone].Name, c.Nodes[gone].Server.Err())
	}
	if _, err := Put(ctx, c.URL(leader), "/after-removal", "v", ""); err != nil {
		t.Fatalf("write on the two remaining members: %v", err)
	}
}

// TestSlowLeaderFsyncExpiresNoSession: the leader's fsync stalls for longer
// than the sessions' timeout while their clients keep heartbeating (any
// member, failing over on 503). No session may expire: heartbeats are
// answered and relayed outside the stalled Ready loop, a new leader renews
// every deadline, and the stalled leader, once it resumes, expires nothing
// without first confirming it still leads (etcd #15247). It runs in virtual
// time: the fsync is held until the test releases it, and the timeline
// (below) is measured on the nodes' clock.
func TestSlowLeaderFsyncExpiresNoSession(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{MinSessionTTL: 500 * time.Millisecond}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(10 * time.Second)
	const timeout, interval = 1500 * time.Millisecond, 250 * time.Millisecond
	client := &batchClient{c: c, expired: map[string]bool{}}
	for range 20 {
		client.ids = append(client.ids, createSession(t, ctx, c.URL(leader), timeout).SessionID)
	}
	// The scenario's timeline: two timeouts of heartbeats so every session
	// is older than its timeout (a follower's own deadlines for them are
	// stale), then a stall of two timeouts with an election, the old
	// leader's return, and two more timeouts.
	client.beatFor(ctx, 2*timeout, interval)
	release := stallFsync(t, ctx, c, leader)
	client.beatFor(ctx, 2*timeout, interval)
	// Virtual time runs ahead of the messages, which travel in real time:
	// on a loaded machine a new leader may have stepped down already (its
	// followers' answers came later than an election timeout of ticks, so
	// check-quorum found no quorum) and the next election is under way. The
	// clients beat on, in virtual time, until the others have a leader.
	newLeader := func() bool {
		return slices.ContainsFunc(c.Others(leader), func(i int) bool { return c.Nodes[i].Server.Status().Role == "leader" })
	}
	if !client.beatUntil(ctx, interval, 20*time.Second, newLeader) {
		t.Fatalf("no new leader elected while %s was stalled: %s", c.Nodes[leader].Name, c.describe())
	}
	if stalled := c.Now().Sub(c.Nodes[leader].Server.LastTick()); stalled <= timeout {
		t.Fatalf("%s's Ready loop ticked %v ago: it was not stalled for longer than the sessions' timeout %v", c.Nodes[leader].Name, stalled, timeout)
	}
	release()
	client.beatFor(ctx, 2*timeout, interval)
	t.Logf("%d of %d heartbeat rounds answered by no member", client.missed, client.rounds)
	for id := range client.expired {
		t.Errorf("session %s expired although its client heartbeated throughout", id)
	}
	for _, id := range client.ids {
		if _, err := SessionInfo(ctx, c.URL(c.WaitLeader(10*time.Second)), id, api.Linearizable, 0); err != nil {
			t.Errorf("session %s gone after the leader's slow fsync: %v", id, err)
		}
	}
}

// stallFsync holds node i's next fsync, brings it about with a write
// through i (its Ready loop syncs the entry), and waits until the sync is
// held: the loop is stuck in it, and Advance goes on without it. It returns
// the release, which the test's cleanup also calls.
func stallFsync(t *testing.T, ctx context.Context, c *Cluster, i int) (release func()) {
	t.Helper()
	fs := c.Nodes[i].FS
	hold := make(chan struct{})
	// Nothing syncs while virtual time stands still and no write is under
	// way, so the next sync counted is the held one.
	before := fs.Calls(vfs.OpSync)
	remove := fs.Inject(vfs.Fault{Ops: vfs.OpSync, Count: 1, Hold: hold})
	resume := c.Stall(i)
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(hold)
			remove()
			resume()
		})
	}
	t.Cleanup(release) // before the cluster closes: a held sync would block its shutdown
	go Put(ctx, c.URL(i), "/slow/fsync", "v", "")
	if !waitFor(10*time.Second, func() bool { return fs.Calls(vfs.OpSync) > before }) {
		t.Fatalf("the write through %s never reached an fsync", c.Nodes[i].Name)
	}
	return release
}

// batchClient heartbeats a batch of sessions as a client library would:
// one batched call, trying each member until one answers (a member that
// cannot reach the leader answers 503). It runs in virtual time.
type batchClient struct {
	c       *Cluster
	ids     []string
	expired map[string]bool // ids a heartbeat answered as expired
	rounds  int             // rounds sent
	missed  int             // rounds no member answered
}

// beat sends one round: a batched heartbeat to each member in turn until
// one answers. A call that hangs (it waits on virtual time, which stands
// still meanwhile) gives up after a few real seconds, as a 503 would.
func (b *batchClient) beat(ctx context.Context) {
	b.rounds++
	for i := range b.c.Nodes {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		hb, err := Heartbeat(callCtx, b.c.URL(i), b.ids...)
		cancel()
		if err != nil {
			continue
		}
		for _, id := range hb.Expired {
			b.expired[id] = true
		}
		return
	}
	b.missed++
}

// beatUntil sends a round every interval of virtual time until cond holds,
// for at most timeout of real time; it reports whether cond held.
func (b *batchClient) beatUntil(ctx context.Context, interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		b.beat(ctx)
		b.c.Advance(interval)
	}
	return true
}

// beatFor sends a round every interval of virtual time for d.
func (b *batchClient) beatFor(ctx context.Context, d, interval time.Duration) {
	for elapsed := time.Duration(0); elapsed < d; elapsed += interval {
		b.beat(ctx)
		b.c.Advance(interval)
	}
}
