package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// waitForTimer waits until the keepalive goroutine waits on clk, and
// returns the duration it waits for.
func waitForTimer(t *testing.T, clk *fakeClock) time.Duration {
	t.Helper()
	waitFor(t, "the keepalive to wait on the clock", func() bool { return len(clk.Waiting()) == 1 })
	return clk.Waiting()[0]
}

func TestKeepaliveCadence(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	clk := newFakeClock()
	c := newTestClient(t, cluster.URLs(), clk)
	s, err := c.NewSession(context.Background(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	interval := s.Timeout() / 3

	for beat := 1; beat <= 3; beat++ {
		if got := waitForTimer(t, clk); got != interval {
			t.Fatalf("beat %d: keepalive waits %v, want timeout/3 = %v", beat, got, interval)
		}
		clk.Advance(interval - time.Millisecond)
		if got := cluster.Heartbeats(s.ID()); got != beat-1 {
			t.Fatalf("before the interval: %d heartbeats, want %d", got, beat-1)
		}
		clk.Advance(time.Millisecond)
		waitFor(t, "a heartbeat", func() bool { return cluster.Heartbeats(s.ID()) == beat })
	}

	// A server going away does not stop the keepalive: it moves on.
	cluster.Proxy(0).Stop()
	clk.Advance(waitForTimer(t, clk))
	waitFor(t, "a heartbeat through the second server", func() bool { return cluster.Heartbeats(s.ID()) == 4 })
	select {
	case <-s.Done():
		t.Fatalf("session ended: %v", s.Err())
	default:
	}
}

func TestSessionEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cause func(t *testing.T, env *sessionEnv)
		want  func(error) bool
	}{
		{"closed", func(t *testing.T, env *sessionEnv) {
			if err := env.session.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}, func(err error) bool { return errors.Is(err, ErrSessionClosed) }},
		{"orphaned", func(t *testing.T, env *sessionEnv) { env.session.Orphan() },
			func(err error) bool { return errors.Is(err, ErrSessionOrphaned) }},
		{"expired by the server", func(t *testing.T, env *sessionEnv) {
			env.cluster.Expire(env.session.ID())
			env.clock.Advance(waitForTimer(t, env.clock))
		}, func(err error) bool { return isCode(err, api.CodeSessionExpired) }},
		{"write reports expiry", func(t *testing.T, env *sessionEnv) {
			env.cluster.Expire(env.session.ID())
			_, err := env.client.Put(context.Background(), "/x", "", WithSession(env.session))
			if !isCode(err, api.CodeSessionExpired) {
				t.Fatalf("Put = %v, want session_expired", err)
			}
		}, func(err error) bool { return isCode(err, api.CodeSessionExpired) }},
		{"lost: no heartbeat for a whole timeout", func(t *testing.T, env *sessionEnv) {
			env.cluster.Close()
			for beat := 0; beat < 3; beat++ {
				env.clock.Advance(waitForTimer(t, env.clock))
			}
		}, func(err error) bool { return errors.Is(err, ErrSessionLost) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newSessionEnv(t)
			tt.cause(t, env)
			select {
			case <-env.session.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed")
			}
			if err := env.session.Err(); !tt.want(err) {
				t.Fatalf("Err = %v", err)
			}
		})
	}
}

type sessionEnv struct {
	cluster interface {
		Expire(string)
		Close()
	}
	clock   *fakeClock
	client  *Client
	session *Session
}

func newSessionEnv(t *testing.T) *sessionEnv {
	cluster := newCluster(t, 1)
	clk := newFakeClock()
	c := newTestClient(t, cluster.URLs(), clk)
	s, err := c.NewSession(context.Background(), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Orphan)
	return &sessionEnv{cluster: cluster, clock: clk, client: c, session: s}
}

func TestCloseDeletesEphemeralNodes(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	s, err := c.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/members/me", "x", Ephemeral(), WithSession(s)); err != nil {
		t.Fatal(err)
	}
	info, err := c.SessionInfo(ctx, s.ID())
	if err != nil || info.EphemeralCount != 1 {
		t.Fatalf("SessionInfo = %+v, %v; want one ephemeral node", info, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/members/me"); !isCode(err, api.CodeNotFound) {
		t.Fatalf("ephemeral node after Close: %v, want not_found", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
}

func TestResumeSessionContinuesSequence(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	s, err := c.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	resumed, err := c.ResumeSession(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Orphan()
	if resumed.Timeout() != s.Timeout() || resumed.nextSeq() <= s.nextSeq() {
		t.Fatalf("resumed session: timeout %v, seq not above the original's", resumed.Timeout())
	}
	if _, err := c.ResumeSession(ctx, "0xdead"); !isCode(err, api.CodeSessionExpired) {
		t.Fatalf("ResumeSession of an unknown id = %v, want session_expired", err)
	}
}
