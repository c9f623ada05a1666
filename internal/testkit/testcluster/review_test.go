package testcluster

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestLockWaiterOfClosedSession: an acquire whose own session ends while it
// waits is told so promptly with 410 session_expired (docs/api.md: a gone session
// is session_expired), not left waiting on its predecessor for the whole
// wait_ms to answer 409 lock_not_held as if the session kept its place; its
// queue node is gone.
func TestLockWaiterOfClosedSession(t *testing.T) {
	c := New(t, 1, Steady(Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := c.URL(0)
	holder := createSession(t, ctx, base, 10*time.Second)
	waiter := createSession(t, ctx, base, 10*time.Second)
	var held api.Lock
	if err := Do(ctx, http.MethodPost, base, "/v1/lock/acquire", nil,
		api.LockRequest{Name: "r", SessionID: holder.SessionID}, &held); err != nil || !held.Held {
		t.Fatalf("holder acquire: %+v, %v", held, err)
	}

	const wait = 4 * time.Second
	type answer struct {
		err     error
		elapsed time.Duration
	}
	answered := make(chan answer, 1)
	go func() {
		start := time.Now()
		var out api.Lock
		err := Do(ctx, http.MethodPost, base, "/v1/lock/acquire", nil,
			api.LockRequest{Name: "r", SessionID: waiter.SessionID, WaitMs: uint64(wait.Milliseconds())}, &out)
		answered <- answer{err, time.Since(start)}
	}()
	if !WaitFor(5*time.Second, func() bool {
		var st api.LockState
		return Do(ctx, http.MethodGet, base, "/v1/lock/r", nil, nil, &st) == nil && st.Waiters == 1
	}) {
		t.Fatal("the waiter never queued")
	}
	if err := Do(ctx, http.MethodPost, base, "/v1/session/close", nil,
		api.SessionRequest{SessionID: waiter.SessionID}, nil); err != nil {
		t.Fatalf("close waiter session: %v", err)
	}

	got := <-answered
	var apiErr *api.Error
	if !errors.As(got.err, &apiErr) || apiErr.Code != api.CodeSessionExpired || got.elapsed > wait/2 {
		t.Errorf("acquire of a session closed while waiting answered %v after %v; want 410 session_expired promptly", got.err, got.elapsed.Round(time.Millisecond))
	}
}

// TestReadIndexContextsUniqueAcrossServers: two followers' first
// linearizable reads, sent at once, are both answered without a resend
// (election timeout / 2). raft's leader ignores a ReadIndex whose context is
// already pending (read_only.go addRequest), so contexts must be unique
// across servers: if every server numbered its read rounds from 1, the
// second follower's read would wait for the resend (and a restarted server
// could be handed an old read index for its own pre-crash request).
func TestReadIndexContextsUniqueAcrossServers(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	leader := c.WaitLeader(10 * time.Second)
	followers := c.Others(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Put(ctx, c.URL(leader), "/x", "v", ""); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(c.Nodes[leader].Server.AppliedIndex(), 5*time.Second)
	const delay = 50 * time.Millisecond
	for _, f := range followers {
		c.Net.SetDelay(c.Nodes[f].ID, c.Nodes[leader].ID, delay)
	}
	elapsed := make(chan time.Duration, len(followers))
	for _, f := range followers {
		go func() {
			start := time.Now()
			if _, err := Get(ctx, c.URL(f), "/x", "linearizable"); err != nil {
				t.Errorf("read on %s: %v", c.Nodes[f].Name, err)
			}
			elapsed <- time.Since(start)
		}()
	}
	first, second := <-elapsed, <-elapsed
	resend := time.Duration(c.opts.ElectionTicks) * c.opts.TickInterval / 2
	t.Logf("first read %v, second read %v (resend interval %v)", first.Round(time.Millisecond), second.Round(time.Millisecond), resend)
	if second-first > resend*3/4 {
		t.Errorf("the second follower's first linearizable read took %v, %v longer than the first: its ReadIndex context collided with the other follower's and was dropped by the leader", second.Round(time.Millisecond), (second - first).Round(time.Millisecond))
	}
}
