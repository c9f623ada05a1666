package client

import (
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/faulthttp"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

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

// clusterOptions are the members' options for the client's tests: sessions
// last at least 30s, so that a session whose keepalive runs on a fake clock
// does not expire on the members' real one while a test runs; tests end
// sessions on purpose with Expire.
var clusterOptions = testcluster.Options{MinSessionTTL: 30 * time.Second}

// newCluster starts n real members, each behind a fault-injecting proxy,
// stopped at the end of the test.
func newCluster(t *testing.T, n int) *faulthttp.Cluster {
	t.Helper()
	return faulthttp.NewCluster(t, n, clusterOptions)
}

// newTestClient returns a client of urls that starts on urls[0], with short
// backoffs, driven by clk (real time when nil).
func newTestClient(t *testing.T, urls []string, clk clock) *Client {
	t.Helper()
	if clk == nil {
		clk = realClock{}
	}
	cfg := Config{Endpoints: urls, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		RequestTimeout: 5 * time.Second}
	c, err := newClient(cfg, clk, func(int) int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fakeClock is a clock that moves only when Advance is called.
type fakeClock struct {
	mu      sync.Mutex // guards the fields below
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at       time.Time
	duration time.Duration
	ch       chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), duration: d, ch: ch})
	return ch
}

// Advance moves time by d and fires every waiter that is due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	pending := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			pending = append(pending, w)
			continue
		}
		w.ch <- f.now
	}
	f.waiters = pending
}

// Waiting returns the durations of the pending After calls.
func (f *fakeClock) Waiting() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	durations := make([]time.Duration, len(f.waiters))
	for i, w := range f.waiters {
		durations[i] = w.duration
	}
	return durations
}

// newClusterB starts one member behind a proxy for a benchmark and returns
// the proxy's URL.
func newClusterB(b *testing.B) []string {
	b.Helper()
	return faulthttp.NewCluster(b, 1, clusterOptions).URLs()
}
