package recipe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// TestRealServer runs the recipes against latchd processes: the cluster
// named by LATCH_TEST_ENDPOINTS (comma-separated), e.g. one started by
// hand, or else three members it starts itself on loopback.
func TestRealServer(t *testing.T) {
	var endpoints []string
	if env := os.Getenv("LATCH_TEST_ENDPOINTS"); env != "" {
		endpoints = strings.Split(env, ",")
	} else {
		endpoints = proccluster.Start(t, proccluster.Options{Nodes: 3}).URLs()
	}
	c, err := client.New(client.Config{Endpoints: endpoints, NotifyJitter: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	suffix := fmt.Sprint(time.Now().UnixNano())
	newSession := func() *client.Session {
		s, err := c.NewSession(context.Background(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("lock handoff and cancelled waiter", func(t *testing.T) {
		name := "real-" + suffix
		sessionB := newSession()
		a, b := NewLock(newSession(), name), NewLock(sessionB, name)
		tokenA, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = b.Acquire(short)
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B while A holds: %v, want a deadline", err)
		}
		if state, err := c.LockState(ctx, name); err != nil || state.Waiters != 0 {
			t.Fatalf("after B gave up: %+v, %v; want no waiter", state, err)
		}
		done := acquireAsync(ctx, b)
		waitFor(t, "B to queue", func() bool {
			state, err := c.LockState(ctx, name)
			return err == nil && state.Waiters == 1
		})
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-done
		if got.err != nil || got.token <= tokenA {
			t.Fatalf("B = %+v, want a token above %d", got, tokenA)
		}
		lost := b.Lost()
		// Only the node's own session may delete it, as B's process could.
		if _, err := c.Delete(ctx, "/locks/"+name+"/"+lockNodeName(t, c, name), client.WithSession(sessionB)); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(lost, 5*time.Second) || !errors.Is(b.Err(), ErrLost) {
			t.Fatalf("B's node deleted: Lost open or Err %v", b.Err())
		}
	})

	t.Run("election and observe", func(t *testing.T) {
		role := "real-" + suffix
		observer := NewElection(newSession(), role)
		observeCtx, stop := context.WithCancel(ctx)
		defer stop()
		leaders := observer.Observe(observeCtx)
		if first := <-leaders; first.FencingToken != 0 {
			t.Fatalf("first observation %+v, want none", first)
		}
		sessionA := newSession()
		a, b := NewElection(sessionA, role), NewElection(newSession(), role)
		tokenA, err := a.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		done := campaignAsync(ctx, b, "b")
		if info := <-leaders; info.FencingToken != tokenA || info.Value != "a" {
			t.Fatalf("observed %+v, want a", info)
		}
		waitFor(t, "B to queue", func() bool { // else A may end before B joins
			state, err := c.ElectionState(ctx, role)
			return err == nil && state.Candidates == 2
		})
		sessionA.Orphan() // A's process "dies": its session expires on the server
		got := <-done
		if got.err != nil || got.token <= tokenA {
			t.Fatalf("B = %+v, want a token above %d", got, tokenA)
		}
		if info := <-leaders; info.FencingToken != got.token || info.Value != "b" {
			t.Fatalf("observed %+v, want b", info)
		}
	})
}

// lockNodeName returns the name of the holder's node of lock name.
func lockNodeName(t *testing.T, c *client.Client, name string) string {
	t.Helper()
	state, err := c.LockState(context.Background(), name)
	if err != nil || state.Holder == nil {
		t.Fatalf("lock state %+v, %v", state, err)
	}
	return state.Holder.Path[strings.LastIndex(state.Holder.Path, "/")+1:]
}
