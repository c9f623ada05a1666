package recipe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// env is a real cluster behind fault-injecting proxies and a client of it.
type env struct {
	cluster *faulthttp.Cluster
	client  *client.Client
}

func newEnv(t *testing.T, servers int) *env {
	t.Helper()
	cluster := faulthttp.NewCluster(t, servers, testcluster.Options{})
	c, err := client.New(client.Config{Endpoints: cluster.URLs(), BackoffBase: time.Millisecond,
		BackoffMax: 10 * time.Millisecond, NotifyJitter: 2 * time.Millisecond, ReconnectJitter: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{cluster: cluster, client: c}
}

// session makes a session with timeout, closed at the end of the test.
func (e *env) session(t *testing.T, timeout time.Duration) *client.Session {
	t.Helper()
	s, err := e.client.NewSession(context.Background(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func (e *env) lockState(t *testing.T, name string) *api.LockState {
	t.Helper()
	state, err := e.client.LockState(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// waitFor polls cond until it holds or 10s pass.
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

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

type acquired struct {
	token uint64
	err   error
}

func acquireAsync(ctx context.Context, l *Lock) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		token, err := l.Acquire(ctx)
		done <- acquired{token, err}
	}()
	return done
}

func TestLockHandoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	a := NewLock(e.session(t, 10*time.Second), "R")
	b := NewLock(e.session(t, 10*time.Second), "R")
	tokenA, err := a.Acquire(context.Background())
	if err != nil || tokenA == 0 || a.Token() != tokenA {
		t.Fatalf("A: Acquire = %d, %v; Token %d", tokenA, err, a.Token())
	}
	done := acquireAsync(context.Background(), b)
	waitFor(t, "B to queue", func() bool { return e.lockState(t, "R").Waiters == 1 })
	select {
	case got := <-done:
		t.Fatalf("B acquired while A held: %+v", got)
	default:
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.token <= tokenA {
		t.Fatalf("B: Acquire = %d, %v; want a token above A's %d", got.token, got.err, tokenA)
	}
	if !closedWithin(a.Lost(), time.Second) || !errors.Is(a.Err(), ErrReleased) {
		t.Fatalf("A after Release: Lost open or Err = %v", a.Err())
	}
	if err := a.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if state := e.lockState(t, "R"); state.Holder == nil || state.Holder.FencingToken != got.token {
		t.Fatalf("lock state = %+v, want B holding %d", state, got.token)
	}
}

// TestLockIdempotent retries an acquire after a 503 and acquires again:
// the session keeps one place and one token.
func TestLockIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	s := e.session(t, 10*time.Second)
	e.cluster.Proxy(0).FailNext(1, api.CodeUnavailable, "")
	first, err := NewLock(s, "R").Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewLock(s, "R").Acquire(context.Background())
	if err != nil || second != first {
		t.Fatalf("second Acquire = %d, %v; want the same token %d", second, err, first)
	}
	children, err := e.client.Children(context.Background(), "/locks/R")
	if err != nil || len(children.Children) != 1 {
		t.Fatalf("queue = %v, %v; want one node", children, err)
	}
}

func TestLockContextEndGivesUpPlace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		// The deadline leaves B time to queue on a loaded machine (it
		// used to be 300ms, which B could miss); the test then cancels.
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Second)
		}},
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, 1)
			a := NewLock(e.session(t, 10*time.Second), "R")
			if _, err := a.Acquire(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			done := acquireAsync(ctx, NewLock(e.session(t, 10*time.Second), "R"))
			waitFor(t, "B to queue", func() bool { return e.lockState(t, "R").Waiters == 1 })
			cancel()
			got := <-done
			if !errors.Is(got.err, context.Canceled) && !errors.Is(got.err, context.DeadlineExceeded) {
				t.Fatalf("Acquire = %+v, want the context's error", got)
			}
			if state := e.lockState(t, "R"); state.Waiters != 0 {
				t.Fatalf("after giving up, %d waiters remain", state.Waiters)
			}
		})
	}
}

// TestLockGiveUpOutlastsLateAcquire: an acquire call held up on its way
// reaches the server only after its caller gave up and released. Giving up
// waits for that call and releases the place it makes, so no place is left
// in the queue (it would hold the lock, once at the head, until the session
// ends), and the session lives on.
func TestLockGiveUpOutlastsLateAcquire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	proxy := e.cluster.Proxy(0)
	a := NewLock(e.session(t, 10*time.Second), "R")
	tokenA, err := a.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	proxy.Inject(faulthttp.Fault{Method: "POST", Path: "/v1/lock/acquire", Times: 1, Kind: faulthttp.Late, Gate: gate})
	sessionB := e.session(t, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := acquireAsync(ctx, NewLock(sessionB, "R"))
	waitFor(t, "B's acquire to reach the proxy", func() bool { return proxy.Count("POST", "/v1/lock/acquire") == 2 })
	cancel()
	waitFor(t, "B's release", func() bool { return proxy.Count("POST", "/v1/lock/release") >= 1 })
	close(gate) // B's acquire reaches the member only now
	if got := <-done; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Acquire = %+v, want the context's error", got)
	}
	lateAnswered := func() bool {
		acquires := 0
		for _, r := range proxy.Requests() {
			if r.Method == "POST" && r.Path == "/v1/lock/acquire" {
				if acquires++; acquires == 2 {
					return r.Status != 0
				}
			}
		}
		return false
	}
	waitFor(t, "the late acquire to be answered or to queue", func() bool {
		return lateAnswered() || e.lockState(t, "R").Waiters > 0
	})
	if state := e.lockState(t, "R"); state.Waiters != 0 || state.Holder == nil || state.Holder.FencingToken != tokenA {
		t.Fatalf("after giving up: lock state %+v, want A (token %d) alone", state, tokenA)
	}
	if err := sessionB.Err(); err != nil {
		t.Fatalf("B's session ended by giving up: %v", err)
	}
}

func TestLockLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		lose func(t *testing.T, e *env, s *client.Session, l *Lock)
	}{
		{"session expired", func(t *testing.T, e *env, s *client.Session, l *Lock) { e.cluster.Expire(s.ID()) }},
		{"node deleted", func(t *testing.T, e *env, s *client.Session, l *Lock) {
			// Only the node's own session may delete it (another's delete is
			// refused), as the holder's process could through the KV API.
			state := e.lockState(t, "R")
			if _, err := e.client.Delete(context.Background(), state.Holder.Path, client.WithSession(s)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, 1)
			s := e.session(t, 600*time.Millisecond)
			l := NewLock(s, "R")
			token, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			lost := l.Lost()
			if closedWithin(lost, 50*time.Millisecond) {
				t.Fatalf("Lost closed while held: %v", l.Err())
			}
			tt.lose(t, e, s, l)
			if !closedWithin(lost, 10*time.Second) {
				t.Fatal("Lost did not close")
			}
			if !errors.Is(l.Err(), ErrLost) || l.Token() != 0 {
				t.Fatalf("Err = %v, Token = %d; want ErrLost and 0", l.Err(), l.Token())
			}
			next, err := NewLock(e.session(t, 10*time.Second), "R").Acquire(context.Background())
			if err != nil || next <= token {
				t.Fatalf("next holder: %d, %v; want a token above %d", next, err, token)
			}
			if err := l.Release(context.Background()); !errors.Is(err, ErrLost) {
				t.Fatalf("Release after loss = %v, want ErrLost", err)
			}
		})
	}
}

type campaigned struct {
	token uint64
	err   error
}

func campaignAsync(ctx context.Context, el *Election, value string) <-chan campaigned {
	done := make(chan campaigned, 1)
	go func() {
		token, err := el.Campaign(ctx, value)
		done <- campaigned{token, err}
	}()
	return done
}

func (e *env) candidates(t *testing.T, role string) int {
	t.Helper()
	state, err := e.client.ElectionState(context.Background(), role)
	if api.CodeOf(err) == api.CodeNotFound && err != nil {
		return 0 // nobody has joined yet
	}
	if err != nil {
		t.Fatal(err)
	}
	return state.Candidates
}

// TestElectionSuccession makes five candidates; each resignation of the
// leader wakes exactly one candidate (no herd: no new watch registrations
// but the successor's own re-checks), and leaders' tokens grow.
func TestElectionSuccession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	const n = 5
	elections := make([]*Election, n)
	results := make([]<-chan campaigned, n)
	for i := range elections {
		elections[i] = NewElection(e.session(t, 10*time.Second), "db")
		results[i] = campaignAsync(context.Background(), elections[i], string(rune('a'+i)))
		waitFor(t, "the candidate to join", func() bool { return e.candidates(t, "db") == i+1 })
	}
	waitFor(t, "every follower to watch", func() bool { return len(e.cluster.Registrations()) == n-1 })
	for i, r := range e.cluster.Registrations() {
		if i > 0 && r.Request.Path == e.cluster.Registrations()[i-1].Request.Path {
			t.Fatalf("two candidates watch %s: a herd", r.Request.Path)
		}
	}
	var last uint64
	registered := -1 // registrations before the last resignation
	for i := 0; i < n; i++ {
		got := <-results[i]
		if got.err != nil || got.token <= last {
			t.Fatalf("candidate %d: Campaign = %+v, want a token above %d", i, got, last)
		}
		if registered >= 0 {
			if extra := len(e.cluster.Registrations()) - registered; extra != 0 {
				t.Fatalf("a resignation caused %d new watch registrations, want 0", extra)
			}
		}
		last = got.token
		leader, err := elections[i].Leader(context.Background())
		if err != nil || leader.Value != string(rune('a'+i)) || leader.FencingToken != got.token {
			t.Fatalf("Leader = %+v, %v; want candidate %d", leader, err, i)
		}
		registered = len(e.cluster.Registrations())
		if err := elections[i].Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(elections[i].Lost(), time.Second) {
			t.Fatal("Lost open after Resign")
		}
	}
	if _, err := elections[0].Leader(context.Background()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader with no candidates = %v, want ErrNoLeader", err)
	}
}

func TestCampaignContextEndResigns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	leader := NewElection(e.session(t, 10*time.Second), "db")
	if _, err := leader.Campaign(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := campaignAsync(ctx, NewElection(e.session(t, 10*time.Second), "db"), "b")
	waitFor(t, "the second candidate", func() bool { return e.candidates(t, "db") == 2 })
	cancel()
	if got := <-done; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Campaign = %+v, want context.Canceled", got)
	}
	if n := e.candidates(t, "db"); n != 1 {
		t.Fatalf("%d candidates after a cancelled campaign, want 1", n)
	}
}

// TestObserveOrder changes the leader several ways (resign, session
// expiry, no candidate, a newcomer) and checks that Observe reports each
// leader once, in order.
func TestObserveOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	observer := NewElection(e.session(t, 10*time.Second), "db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders := observer.Observe(ctx)
	next := func() LeaderInfo {
		t.Helper()
		select {
		case info, ok := <-leaders:
			if !ok {
				t.Fatal("Observe ended")
			}
			return info
		case <-time.After(30 * time.Second):
			t.Fatal("no leader change observed within 30s")
		}
		return LeaderInfo{}
	}
	if first := next(); first.FencingToken != 0 {
		t.Fatalf("first observation = %+v, want no leader", first)
	}
	sessionA, sessionB := e.session(t, 10*time.Second), e.session(t, 10*time.Second)
	a, b := NewElection(sessionA, "db"), NewElection(sessionB, "db")
	tokenA, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	bDone := campaignAsync(ctx, b, "b")
	var seen []LeaderInfo
	seen = append(seen, next())
	// B must be queued before A's session dies, or the role has a moment
	// without candidates between A's end and B's join, which Observe
	// rightly reports.
	waitFor(t, "the second candidate", func() bool { return e.candidates(t, "db") == 2 })
	e.cluster.Expire(sessionA.ID()) // A's session dies: B takes over
	got := <-bDone
	if got.err != nil {
		t.Fatalf("b's campaign: %v", got.err)
	}
	seen = append(seen, next())
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, next())
	c := NewElection(e.session(t, 10*time.Second), "db")
	tokenC, err := c.Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, next())
	want := []LeaderInfo{{Value: "a", FencingToken: tokenA}, {Value: "b", FencingToken: got.token}, {}, {Value: "c", FencingToken: tokenC}}
	for i := range want {
		if seen[i].Value != want[i].Value || seen[i].FencingToken != want[i].FencingToken {
			t.Fatalf("observed %+v, want the values and tokens of %+v", seen, want)
		}
	}
}

// TestObserveReportsANewValueOfTheLeader: a leader that campaigns again
// with a new value (a repeated join replaces it) is observed with it.
func TestObserveReportsANewValueOfTheLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders := NewElection(e.session(t, 10*time.Second), "db").Observe(ctx)
	next := func() LeaderInfo {
		t.Helper()
		select {
		case info := <-leaders:
			return info
		case <-time.After(10 * time.Second):
			t.Fatal("no leader change observed within 10s")
		}
		return LeaderInfo{}
	}
	if first := next(); first.FencingToken != 0 {
		t.Fatalf("first observation = %+v, want no leader", first)
	}
	leader := NewElection(e.session(t, 10*time.Second), "db")
	token, err := leader.Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got.Value != "old" || got.FencingToken != token {
		t.Fatalf("observed %+v, want value old with token %d", got, token)
	}
	if again, err := leader.Campaign(ctx, "new"); err != nil || again != token {
		t.Fatalf("second Campaign = %d, %v; want the same token %d", again, err, token)
	}
	if got := next(); got.Value != "new" || got.FencingToken != token {
		t.Fatalf("observed %+v, want value new with the same token %d", got, token)
	}
}

// TestRecipesOutlastUnavailability: a cluster that answers 503 to more
// calls than the client's attempts at one (as during an election) ends
// neither a campaign nor a lock's acquire: each asks again and gets what
// it waits for once the cluster answers.
func TestRecipesOutlastUnavailability(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path string
		wait func(ctx context.Context, s *client.Session) (uint64, error)
	}{
		{"/v1/election/join", func(ctx context.Context, s *client.Session) (uint64, error) {
			return NewElection(s, "db").Campaign(ctx, "a")
		}},
		{"/v1/lock/acquire", func(ctx context.Context, s *client.Session) (uint64, error) {
			return NewLock(s, "R").Acquire(ctx)
		}},
	} {
		t.Run(tt.path, func(t *testing.T) {
			e := newEnv(t, 1)
			e.cluster.Proxy(0).Inject(faulthttp.Fault{Method: "POST", Path: tt.path, Times: 3 * client.DefaultMaxAttempts,
				Kind: faulthttp.Reply, Err: api.Error{Code: api.CodeUnavailable, Message: "no leader (injected)"}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			token, err := tt.wait(ctx, e.session(t, 10*time.Second))
			if err != nil || token == 0 {
				t.Fatalf("through %d unavailable answers to %s: %d, %v; want a token", 3*client.DefaultMaxAttempts, tt.path, token, err)
			}
		})
	}
}
