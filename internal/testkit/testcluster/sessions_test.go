package testcluster

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/server"
)

// Scenarios of issue 4 for sessions and exactly-once writes: expiry deletes
// ephemeral nodes on every replica (checker S), heartbeats through a
// follower survive a leader crash, a client that only reaches a minority
// loses its session on the majority, retried writes apply once (checker Q),
// timeouts are clamped.

// heartbeater sends a heartbeat for session to one node every interval
// until stopped, and counts what came back.
type heartbeater struct {
	stop     chan struct{}
	once     sync.Once // closes stop
	done     chan struct{}
	beats    atomic.Int64 // answered alive
	expired  atomic.Int64 // answered session_expired
	failures atomic.Int64 // other errors (a node down, no leader)
}

func startHeartbeats(base, session string, interval time.Duration) *heartbeater {
	h := &heartbeater{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			_, err := Heartbeat(ctx, base, session)
			cancel()
			switch {
			case err == nil:
				h.beats.Add(1)
			case api.CodeOf(err) == api.CodeSessionExpired:
				h.expired.Add(1)
			default:
				h.failures.Add(1)
			}
			select {
			case <-h.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return h
}

// halt stops the heartbeats and returns when the last one was answered; it
// may be called again.
func (h *heartbeater) halt() time.Time {
	h.once.Do(func() { close(h.stop) })
	<-h.done
	return time.Now()
}

// virtualSteady is Steady(opts) in virtual time (Options.Time): the session
// scenarios driven by the clock alone run without waiting for real time.
func virtualSteady(opts Options) Options {
	opts.Time = clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return Steady(opts)
}

// beatVirtually sends n heartbeats for session through node i, one every
// interval of virtual time, and fails unless each is answered alive. It
// returns the virtual time of the last.
//
// A follower answers unavailable while its last relay's acknowledgement is
// still on its way: virtual time can run ahead of that real-time round
// trip. Such a beat is sent again, at the same virtual time, until the
// acknowledgement lands (a relay sent is acknowledged without time passing).
func beatVirtually(t *testing.T, ctx context.Context, c *Cluster, i int, session string, n int, interval time.Duration) time.Time {
	t.Helper()
	var last time.Time
	for k := 0; k < n; k++ {
		if k > 0 {
			c.Advance(interval)
		}
		var err error
		waitFor(10*time.Second, func() bool {
			_, err = Heartbeat(ctx, c.URL(i), session)
			return api.CodeOf(err) != api.CodeUnavailable
		})
		if err != nil {
			t.Fatalf("heartbeat %d of %d through %s at %v: %v", k+1, n, c.Nodes[i].Name, c.Now(), err)
		}
		last = c.Now()
	}
	return last
}

// beatsAnswered sends heartbeats for session through node i, one every
// interval of virtual time, until n were answered alive; a heartbeat
// answered session_expired fails the test, other errors (no leader during
// an election) are retried at the next interval, within timeout of real time.
func beatsAnswered(t *testing.T, ctx context.Context, c *Cluster, i int, session string, n int, interval, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	alive, failed := 0, 0
	for alive < n {
		_, err := Heartbeat(ctx, c.URL(i), session)
		switch {
		case err == nil:
			alive++
		case api.CodeOf(err) == api.CodeSessionExpired:
			t.Fatalf("a heartbeat through %s answered session_expired after %d alive", c.Nodes[i].Name, alive)
		default:
			failed++
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d heartbeats answered alive within %v (%d failed)", alive, n, timeout, failed)
		}
		c.Advance(interval)
	}
}

// waitSessionGone waits until node i, read linearizably, no longer knows
// session, advancing virtual time meanwhile if the cluster runs on it.
func waitSessionGone(t *testing.T, ctx context.Context, c *Cluster, i int, session string, timeout time.Duration) {
	t.Helper()
	var last error
	ok := c.AdvanceUntil(timeout, func() bool {
		_, last = SessionInfo(ctx, c.URL(i), session, api.Linearizable, 0)
		return api.CodeOf(last) == api.CodeSessionExpired
	})
	if !ok {
		t.Fatalf("session %s still known to %s after %v (last answer: %v): %s",
			session, c.Nodes[i].Name, timeout, last, c.describe())
	}
}

// marker writes a fresh key through node i and returns its index: every
// entry committed before the call is at or below it.
func marker(t *testing.T, ctx context.Context, c *Cluster, i int) uint64 {
	t.Helper()
	n, err := Put(ctx, c.URL(i), fmt.Sprintf("/markers/m%d", time.Now().UnixNano()), "", "")
	if err != nil {
		t.Fatalf("marker write through %s: %v", c.Nodes[i].Name, err)
	}
	return n.Index
}

// checkGone fails unless each of nodes, once it applied index, has neither
// the session nor any of paths (stale reads: what each replica holds).
func checkGone(t *testing.T, ctx context.Context, c *Cluster, nodes []int, index uint64, session string, paths ...string) {
	t.Helper()
	for _, i := range nodes {
		if _, err := SessionInfo(ctx, c.URL(i), session, api.Stale, index); api.CodeOf(err) != api.CodeSessionExpired {
			t.Errorf("%s at index %d: session %s: %v, want session_expired", c.Nodes[i].Name, index, session, err)
		}
		for _, p := range paths {
			if n, err := GetAt(ctx, c.URL(i), p, api.Stale, index); api.CodeOf(err) != api.CodeNotFound {
				t.Errorf("%s at index %d: ephemeral %s: %+v, %v; want not_found", c.Nodes[i].Name, index, p, n, err)
			}
		}
	}
}

// checkPresent fails unless each of nodes, once it applied index, holds
// every one of paths as an ephemeral node of session.
func checkPresent(t *testing.T, ctx context.Context, c *Cluster, nodes []int, index uint64, session string, paths ...string) {
	t.Helper()
	for _, i := range nodes {
		for _, p := range paths {
			n, err := GetAt(ctx, c.URL(i), p, api.Stale, index)
			if err != nil || !n.Ephemeral || n.OwnerHandle != sessionHandle(t, session) {
				t.Errorf("%s at index %d: %s = %+v, %v; want an ephemeral node of %s", c.Nodes[i].Name, index, p, n, err, session)
			}
		}
	}
}

// TestSessionExpiryDeletesEphemeralsEverywhere: a session kept alive
// through a follower for several timeouts lives; once its heartbeats stop it
// expires no sooner than its timeout, and its ephemeral nodes (plain and
// sequential) are gone on every replica.
//
// It runs in virtual time: heartbeats every quarter timeout of the nodes'
// clock, and the expiry measured on it.
func TestSessionExpiryDeletesEphemeralsEverywhere(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{MinSessionTTL: 200 * time.Millisecond}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := c.Others(leader)[0]
	const timeout = time.Second
	s := createSession(t, ctx, c.URL(follower), timeout)
	owned := SessionWrite{SessionID: s.SessionID, Ephemeral: true}
	if _, err := SessionPut(ctx, c.URL(follower), "/eph/plain", "x", owned); err != nil {
		t.Fatal(err)
	}
	owned.Sequential = true
	seq, err := SessionPut(ctx, c.URL(follower), "/eph/queue/item-", "x", owned)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"/eph/plain", seq.Path}

	lastBeat := beatVirtually(t, ctx, c, follower, s.SessionID, 12, timeout/4) // three timeouts' worth
	info, err := SessionInfo(ctx, c.URL(leader), s.SessionID, api.Linearizable, 0)
	if err != nil || info.EphemeralCount != 2 {
		t.Fatalf("heartbeating session after 12 beats: %+v, %v; want alive with 2 ephemeral nodes", info, err)
	}

	waitSessionGone(t, ctx, c, leader, s.SessionID, 20*time.Second)
	if elapsed := c.Now().Sub(lastBeat); elapsed < timeout {
		t.Fatalf("session expired %v after its last heartbeat, before its timeout %v", elapsed, timeout)
	}
	index := marker(t, ctx, c, leader)
	checkGone(t, ctx, c, c.Running(), index, s.SessionID, paths...)
	for _, i := range c.Running() {
		if _, err := Heartbeat(ctx, c.URL(i), s.SessionID); api.CodeOf(err) != api.CodeSessionExpired {
			t.Errorf("heartbeat to %s after expiry: %v, want session_expired", c.Nodes[i].Name, err)
		}
	}
	c.EnsureSame(10 * time.Second)
}

// TestSessionSurvivesLeaderCrash: heartbeats sent only to a follower keep a
// session, and its ephemeral node, alive across a crash of the leader (the
// new leader renews every session, relays reach it); the crashed node has
// the node after it restarts. Once the heartbeats stop the session expires,
// so it was the heartbeats that kept it.
//
// It runs in virtual time.
func TestSessionSurvivesLeaderCrash(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{MinSessionTTL: 200 * time.Millisecond}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := c.Others(leader)[0]
	const timeout = time.Second
	s := createSession(t, ctx, c.URL(follower), timeout)
	if _, err := SessionPut(ctx, c.URL(follower), "/keep/me", "x", SessionWrite{SessionID: s.SessionID, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	beatVirtually(t, ctx, c, follower, s.SessionID, 2, timeout/4)

	c.Crash(leader)
	// Heartbeats go on through the follower while the others elect a leader
	// (those answered 503 meanwhile are retried), then three timeouts under
	// the new leader; none may be answered session_expired.
	beatsAnswered(t, ctx, c, follower, s.SessionID, 1, timeout/4, 30*time.Second)
	newLeader := c.WaitLeader(10 * time.Second)
	beatsAnswered(t, ctx, c, follower, s.SessionID, 12, timeout/4, 30*time.Second)
	info, err := SessionInfo(ctx, c.URL(newLeader), s.SessionID, api.Linearizable, 0)
	if err != nil || info.EphemeralCount != 1 {
		t.Fatalf("session after the crash: %+v, %v; want alive with its ephemeral node", info, err)
	}
	index := marker(t, ctx, c, newLeader)
	checkPresent(t, ctx, c, c.Running(), index, s.SessionID, "/keep/me")
	c.Restart(leader)
	// The restarted node learns the leader from its heartbeats, sent on ticks.
	if !c.AdvanceUntil(10*time.Second, func() bool { return c.Nodes[leader].statusLeader() != raft.None }) {
		t.Fatalf("restarted %s learned no leader: %s", c.Nodes[leader].Name, c.describe())
	}
	checkPresent(t, ctx, c, []int{leader}, index, s.SessionID, "/keep/me")

	waitSessionGone(t, ctx, c, c.WaitLeader(10*time.Second), s.SessionID, 20*time.Second)
	index = marker(t, ctx, c, c.WaitLeader(10*time.Second))
	checkGone(t, ctx, c, c.Running(), index, s.SessionID, "/keep/me")
	c.EnsureSame(10 * time.Second)
}

// TestPartitionedHeartbeatsExpire: a client that heartbeats only to a node
// cut off from the majority (a follower, or the leader itself) loses its
// session on the majority side, with its ephemeral node; after the
// partition heals, the cut-off node learns it too.
func TestPartitionedHeartbeatsExpire(t *testing.T) {
	tests := []struct {
		name     string
		minority func(c *Cluster, leader int) int
	}{
		{"isolated follower", func(c *Cluster, leader int) int { return c.Others(leader)[0] }},
		{"isolated leader", func(c *Cluster, leader int) int { return leader }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t, 3, virtualSteady(Options{MinSessionTTL: 200 * time.Millisecond}))
			ctx := ctxT(t, 60*time.Second)
			minority := tt.minority(c, c.WaitLeader(5*time.Second))
			majority := c.Others(minority)
			const timeout = 800 * time.Millisecond
			s := createSession(t, ctx, c.URL(minority), timeout)
			if _, err := SessionPut(ctx, c.URL(minority), "/part/me", "x", SessionWrite{SessionID: s.SessionID, Ephemeral: true}); err != nil {
				t.Fatal(err)
			}
			c.WaitApplied(c.Nodes[minority].Server.AppliedIndex(), 10*time.Second)
			beatVirtually(t, ctx, c, minority, s.SessionID, 2, timeout/4)
			// From here the client heartbeats in real time, on its own, while
			// virtual time advances.
			beats := startHeartbeats(c.URL(minority), s.SessionID, 20*time.Millisecond)
			defer beats.halt()

			c.Net.Partition(c.IDs(minority), c.IDs(majority...))
			majorityLeader := c.LeaderIn(10*time.Second, majority...)
			waitSessionGone(t, ctx, c, majorityLeader, s.SessionID, 20*time.Second)
			index := marker(t, ctx, c, majorityLeader)
			checkGone(t, ctx, c, majority, index, s.SessionID, "/part/me")

			c.Net.Heal()
			ok := c.AdvanceUntil(20*time.Second, func() bool { return beats.expired.Load() > 0 })
			if !ok {
				t.Fatalf("after healing, heartbeats to %s still answered alive", c.Nodes[minority].Name)
			}
			checkGone(t, ctx, c, []int{minority}, index, s.SessionID, "/part/me")
			c.EnsureSame(10 * time.Second)
		})
	}
}

// TestBatchedHeartbeat: one call carries many ids; the dead ones come back
// in expired, the live ones stay alive.
func TestBatchedHeartbeat(t *testing.T) {
	c := New(t, 3, Steady(Options{MinSessionTTL: 200 * time.Millisecond}))
	ctx := ctxT(t, 30*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := c.Others(leader)[0]
	var ids []string
	for range 5 {
		s := createSession(t, ctx, c.URL(leader), 10*time.Second)
		ids = append(ids, s.SessionID)
	}
	var closed api.Closed
	if err := Do(ctx, http.MethodPost, c.URL(leader), "/v1/session/close", nil, api.SessionRequest{SessionID: ids[2]}, &closed); err != nil {
		t.Fatal(err)
	}
	// A follower answers from what it applied: let it learn of the close.
	c.WaitApplied(closed.Index, 10*time.Second)
	hb, err := Heartbeat(ctx, c.URL(follower), ids...)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Alive || len(hb.Expired) != 1 || hb.Expired[0] != ids[2] || hb.Index < closed.Index {
		t.Fatalf("batched heartbeat = %+v, want alive:false, expired [%s], index >= %d", hb, ids[2], closed.Index)
	}
	hb, err = Heartbeat(ctx, c.URL(follower), ids[0], ids[1], ids[3])
	if err != nil || !hb.Alive || len(hb.Expired) != 0 {
		t.Fatalf("batched heartbeat of live sessions = %+v, %v", hb, err)
	}
}

// TestExactlyOnceRetries: a write retried with the same session_id and
// request_seq, through any node, returns the first result and is applied
// once; a new request_seq is a new write.
func TestExactlyOnceRetries(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 30*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	s := createSession(t, ctx, c.URL(leader), 10*time.Second)
	write := func(seq uint64) SessionWrite { return SessionWrite{SessionID: s.SessionID, RequestSeq: seq} }

	t.Run("sequential create", func(t *testing.T) {
		w := write(1)
		w.Sequential = true
		var first api.Node
		for i := range c.Nodes {
			n, err := SessionPut(ctx, c.URL(i), "/once/q/item-", "v", w)
			if err != nil {
				t.Fatalf("attempt through %s: %v", c.Nodes[i].Name, err)
			}
			if i == 0 {
				first = n
			} else if n.Path != first.Path || n.CreatedIndex != first.CreatedIndex {
				t.Fatalf("retry through %s created %+v, first attempt %+v", c.Nodes[i].Name, n, first)
			}
		}
		next := write(2)
		next.Sequential = true
		n, err := SessionPut(ctx, c.URL(leader), "/once/q/item-", "v", next)
		if err != nil || n.Path <= first.Path {
			t.Fatalf("a new request_seq: %+v, %v; want a new node after %s", n, err, first.Path)
		}
		children, err := ChildrenAt(ctx, c.URL(leader), "/once/q", api.Linearizable, 0)
		if err != nil || len(children.Children) != 2 {
			t.Fatalf("children of /once/q = %+v, %v; want 2", children, err)
		}
	})
	t.Run("put", func(t *testing.T) {
		for attempt := range 3 {
			n, err := SessionPut(ctx, c.URL(attempt%3), "/once/p", "v", write(3))
			if err != nil || n.Version != 1 {
				t.Fatalf("attempt %d: %+v, %v; want version 1 every time", attempt, n, err)
			}
		}
		if n, err := Get(ctx, c.URL(leader), "/once/p", api.Linearizable); err != nil || n.Version != 1 {
			t.Fatalf("after retries: %+v, %v; want version 1", n, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		for attempt := range 3 {
			if _, err := SessionDelete(ctx, c.URL(attempt%3), "/once/p", write(4)); err != nil {
				t.Fatalf("attempt %d: %v; want the first result (deleted)", attempt, err)
			}
		}
		if _, err := SessionDelete(ctx, c.URL(leader), "/once/p", write(5)); api.CodeOf(err) != api.CodeNotFound {
			t.Fatalf("a new request_seq deleting again: %v, want not_found", err)
		}
	})
	c.EnsureSame(10 * time.Second)
}

// TestExactlyOnceAcrossLeaderChange: a sequential create is sent to the
// leader, which crashes right after (its outcome unknown to the client), or
// once the write reached a follower (committed); the retry through another
// node with the same session_id and request_seq leaves exactly one node,
// and, if the first attempt committed, returns its path. It runs in virtual
// time: the election after the crash comes about as the clock advances.
func TestExactlyOnceAcrossLeaderChange(t *testing.T) {
	tests := []struct {
		name string
		// crashWhen returns once the leader should crash.
		crashWhen func(c *Cluster, follower int) bool
	}{
		{"crash right after sending", func(c *Cluster, follower int) bool { return true }},
		{"crash once a follower applied it", func(c *Cluster, follower int) bool {
			return waitFor(10*time.Second, func() bool {
				children, err := c.Nodes[follower].Server.Children(context.Background(), "/xo", staleRead)
				return err == nil && len(children.Children) > 0
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t, 3, virtualSteady(Options{}))
			ctx := ctxT(t, 60*time.Second)
			leader := c.WaitLeader(5 * time.Second)
			follower := c.Others(leader)[0]
			s := createSession(t, ctx, c.URL(leader), 20*time.Second)
			w := SessionWrite{SessionID: s.SessionID, RequestSeq: 7, Sequential: true}
			type answer struct {
				node api.Node
				err  error
			}
			first := make(chan answer, 1)
			go func() {
				n, err := SessionPut(ctx, c.URL(leader), "/xo/item-", "v", w)
				first <- answer{n, err}
			}()
			if !tt.crashWhen(c, follower) {
				t.Fatalf("the write never reached %s", c.Nodes[follower].Name)
			}
			c.Crash(leader)
			original := <-first
			committed := ""
			if original.err == nil {
				committed = original.node.Path
			}
			if children, err := c.Nodes[follower].Server.Children(ctx, "/xo", staleRead); err == nil && len(children.Children) == 1 {
				committed = "/xo/" + children.Children[0]
			}

			c.WaitLeader(10 * time.Second) // the survivors elect one as the clock advances
			var (
				retried api.Node
				err     error
			)
			ok := c.AdvanceUntil(30*time.Second, func() bool {
				retried, err = SessionPut(ctx, c.URL(follower), "/xo/item-", "v", w)
				return err == nil
			})
			if !ok {
				t.Fatalf("retry through %s never succeeded: %v", c.Nodes[follower].Name, err)
			}
			if committed != "" && retried.Path != committed {
				t.Fatalf("retry returned %s, but the first attempt committed %s", retried.Path, committed)
			}
			children, err := ChildrenAt(ctx, c.URL(follower), "/xo", api.Linearizable, 0)
			if err != nil || len(children.Children) != 1 || "/xo/"+children.Children[0] != retried.Path {
				t.Fatalf("children of /xo = %+v, %v; want exactly %s (first attempt: %+v, %v)",
					children, err, retried.Path, original.node, original.err)
			}
			c.Restart(leader)
			// The restarted node learns the leader from its heartbeats, sent on ticks.
			if !c.AdvanceUntil(10*time.Second, func() bool { return c.Nodes[leader].statusLeader() != raft.None }) {
				t.Fatalf("restarted %s learned no leader: %s", c.Nodes[leader].Name, c.describe())
			}
			c.EnsureSame(15 * time.Second)
		})
	}
}

// TestSessionTimeoutClamped: the server clamps a requested timeout to
// [MinSessionTTL, MaxSessionTTL] and returns, and keeps, the chosen value.
func TestSessionTimeoutClamped(t *testing.T) {
	c := New(t, 3, Steady(Options{MinSessionTTL: time.Second, MaxSessionTTL: 5 * time.Second}))
	ctx := ctxT(t, 30*time.Second)
	tests := []struct {
		name      string
		requested time.Duration
		want      uint64
	}{
		{"zero takes the minimum", 0, 1000},
		{"below the minimum", 10 * time.Millisecond, 1000},
		{"the minimum", time.Second, 1000},
		{"inside the range", 3 * time.Second, 3000},
		{"the maximum", 5 * time.Second, 5000},
		{"above the maximum", time.Hour, 5000},
	}
	for k, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := k % len(c.Nodes)
			s := createSession(t, ctx, c.URL(node), tt.requested)
			if s.TimeoutMs != tt.want {
				t.Fatalf("requested %v: timeout_ms %d, want %d", tt.requested, s.TimeoutMs, tt.want)
			}
			for i := range c.Nodes {
				info, err := SessionInfo(ctx, c.URL(i), s.SessionID, api.Stale, s.Index)
				if err != nil || info.TimeoutMs != tt.want {
					t.Fatalf("%s: session %+v, %v; want timeout_ms %d", c.Nodes[i].Name, info, err, tt.want)
				}
			}
		})
	}
}

// staleRead reads a replica's own state.
var staleRead = server.ReadOptions{Consistency: api.Stale}

// TestHeartbeatToCutOffNodeIsNotAlive: once the majority has expired a
// session, a node cut off from it must not answer that session's heartbeats
// alive:true (a client told so would never fail over, and its library would
// never report the session lost while the partition lasts).
//
// It runs in virtual time.
func TestHeartbeatToCutOffNodeIsNotAlive(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{MinSessionTTL: 200 * time.Millisecond}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	cutOff := c.Others(leader)[0]
	s := createSession(t, ctx, c.URL(cutOff), 800*time.Millisecond)
	c.WaitApplied(s.Index, 10*time.Second)
	c.Net.Partition(c.IDs(cutOff), c.IDs(c.Others(cutOff)...))
	waitSessionGone(t, ctx, c, c.LeaderIn(10*time.Second, c.Others(cutOff)...), s.SessionID, 20*time.Second)
	hb, err := Heartbeat(ctx, c.URL(cutOff), s.SessionID)
	if err == nil {
		t.Fatalf("%s, cut off from the majority that expired the session, answered its heartbeat %+v; "+
			"want unavailable (so the client fails over) or session_expired", c.Nodes[cutOff].Name, hb)
	}
}
