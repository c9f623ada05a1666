package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
)

// watchEnv is a cluster, a client of it and a session.
type watchEnv struct {
	cluster *faulthttp.Cluster
	client  *Client
	session *Session
}

func newWatchEnv(t *testing.T, servers int) *watchEnv {
	t.Helper()
	cluster := newCluster(t, servers)
	c := newTestClient(t, cluster.URLs(), nil)
	s, err := c.NewSession(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return &watchEnv{cluster: cluster, client: c, session: s}
}

func (env *watchEnv) put(t *testing.T, path, value string) *api.Node {
	t.Helper()
	node, err := env.client.Put(context.Background(), path, value, WithSession(env.session))
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// receive returns the next event of w, failing after 10s.
func receive(t *testing.T, w *Watcher) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch on %s ended: %v", w.Path(), w.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no event on %s within 10s", w.Path())
	}
	return Event{}
}

func TestWatchOneShot(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.put(t, "/config", "v1")
	w, err := env.session.Watch(context.Background(), "/config")
	if err != nil {
		t.Fatal(err)
	}
	if w.CurrentVersion() != 1 {
		t.Fatalf("CurrentVersion = %d, want 1", w.CurrentVersion())
	}
	node := env.put(t, "/config", "v2")
	env.put(t, "/config", "v3")
	ev := receive(t, w)
	if ev.Event.Event != api.EventChanged || ev.Path != "/config" || ev.Version != 2 || ev.Index != node.ModifiedIndex || ev.Resync {
		t.Fatalf("event = %+v, want CHANGED /config version 2 at %d", ev, node.ModifiedIndex)
	}
	if _, open := <-w.Events(); open {
		t.Fatal("a one-shot watcher delivered a second event")
	}
	if w.Err() != nil {
		t.Fatalf("Err after a one-shot fired = %v, want nil", w.Err())
	}
	if env.client.LastIndex() < ev.Index {
		t.Fatalf("LastIndex %d below the event's index %d: a read could go back in time", env.client.LastIndex(), ev.Index)
	}
}

func TestWatchPersistentRecursiveOrder(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	w, err := env.session.Watch(context.Background(), "/app", WatchRecursive(), Persistent())
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := 0; i < 20; i++ {
		want = append(want, env.put(t, "/app/key", "v").ModifiedIndex)
	}
	var last uint64
	for i := 0; i < len(want); {
		ev := receive(t, w)
		if ev.Index < last {
			t.Fatalf("event index %d after %d: out of order", ev.Index, last)
		}
		last = ev.Index
		if ev.Path == "/app/key" {
			if ev.Index != want[i] {
				t.Fatalf("event %d at index %d, want %d", i, ev.Index, want[i])
			}
			i++
		}
	}
}

func TestWatchKnownIndexFiresAtOnce(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	read := env.put(t, "/x", "1")
	env.put(t, "/x", "2") // a change between the read and the watch
	w, err := env.session.Watch(context.Background(), "/x", KnownIndex(read.Index))
	if err != nil {
		t.Fatal(err)
	}
	if ev := receive(t, w); !ev.Resync || ev.Path != "/x" {
		t.Fatalf("event = %+v, want a resync of /x", ev)
	}
}

// TestWatchReregisters ends the stream (a slow-consumer drop) or stops the
// server it is on, changes the node while the watches are gone, and checks
// that the watcher is re-registered with the index it had seen and hears of
// the change.
func TestWatchReregisters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		lose func(env *watchEnv)
	}{
		{"stream ended by the server", func(env *watchEnv) { env.cluster.CutStreams("slow consumer: 9 events undelivered") }},
		{"server stopped", func(env *watchEnv) { env.cluster.Proxy(0).Stop() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newWatchEnv(t, 2)
			w, err := env.session.Watch(context.Background(), "/k", Persistent())
			if err != nil {
				t.Fatal(err)
			}
			first := env.put(t, "/k", "1")
			if ev := receive(t, w); ev.Index != first.ModifiedIndex {
				t.Fatalf("first event at %d, want %d", ev.Index, first.ModifiedIndex)
			}
			before := len(env.cluster.Registrations())
			tt.lose(env)
			missed := env.put(t, "/k", "2")
			ev := receive(t, w)
			if ev.Index < missed.ModifiedIndex {
				t.Fatalf("after the stream was lost: event %+v, want one at or after %d", ev, missed.ModifiedIndex)
			}
			regs := env.cluster.Registrations()
			if len(regs) <= before {
				t.Fatal("the watch was not registered again")
			}
			again := regs[before].Request
			if again.KnownIndex != first.ModifiedIndex || !again.Persistent || again.Path != "/k" {
				t.Fatalf("re-registration = %+v, want known_index %d (the last index seen)", again, first.ModifiedIndex)
			}
			// And it keeps working after.
			later := env.put(t, "/k", "3")
			for ev.Index < later.ModifiedIndex {
				ev = receive(t, w)
			}
			if ev.Index != later.ModifiedIndex {
				t.Fatalf("event at %d, want %d", ev.Index, later.ModifiedIndex)
			}
		})
	}
}

func TestWatchEndsWithSession(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	w, err := env.session.Watch(context.Background(), "/k")
	if err != nil {
		t.Fatal(err)
	}
	env.cluster.Expire(env.session.ID())
	// The session's next write notices the expiry.
	_, _ = env.client.Put(context.Background(), "/y", "", WithSession(env.session))
	select {
	case _, open := <-w.Events():
		if open {
			t.Fatal("event after the session ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not end with its session")
	}
	if !IsSessionGone(w.Err()) {
		t.Fatalf("Err = %v, want session_expired", w.Err())
	}
}

func TestWatchContextEnds(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.session.Watch(ctx, "/k", Persistent())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range w.Events() {
	}
	if w.Err() != ErrWatchClosed {
		t.Fatalf("Err = %v, want ErrWatchClosed", w.Err())
	}
}

// TestNotifyJitter checks the herd defence: each notification waits a
// random delay drawn below Config.NotifyJitter (or the watch's own bound),
// and a stream reconnect waits one drawn below ReconnectJitter.
func TestNotifyJitter(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.client.cfg.NotifyJitter = 40 * time.Millisecond
	env.client.cfg.ReconnectJitter = 30 * time.Millisecond
	var mu sync.Mutex
	var bounds []time.Duration
	env.client.jitter = func(bound time.Duration) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		bounds = append(bounds, bound)
		return randomJitter(bound)
	}
	drawn := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), bounds...)
	}
	tests := []struct {
		name string
		opts []WatchOption
		want time.Duration
	}{
		{"config default", nil, 40 * time.Millisecond},
		{"per watch", []WatchOption{WatchJitter(5 * time.Millisecond)}, 5 * time.Millisecond},
		{"off for a single waiter", []WatchOption{WatchJitter(0)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := env.session.Watch(context.Background(), "/j", tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			before := len(drawn())
			env.put(t, "/j", "x")
			receive(t, w)
			got := drawn()[before:]
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("jitter bounds drawn = %v, want [%v]", got, tt.want)
			}
		})
	}
	w, err := env.session.Watch(context.Background(), "/j", Persistent())
	if err != nil {
		t.Fatal(err)
	}
	before := len(drawn())
	env.cluster.CutStreams("slow consumer")
	env.put(t, "/j", "y")
	receive(t, w)
	got := drawn()[before:]
	if len(got) < 2 || got[0] != 30*time.Millisecond {
		t.Fatalf("after a lost stream the bounds drawn were %v, want the reconnect jitter first", got)
	}
	for i := 0; i < 1000; i++ {
		if d := randomJitter(time.Millisecond); d < 0 || d >= time.Millisecond {
			t.Fatalf("randomJitter(1ms) = %v, out of [0, 1ms)", d)
		}
	}
}

// TestWatchCloseCancelsOnServer closes a persistent watcher: the server
// no longer holds its watch.
func TestWatchCloseCancelsOnServer(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	w, err := env.session.Watch(context.Background(), "/k", Persistent())
	if err != nil {
		t.Fatal(err)
	}
	if n := env.cluster.WatchCount(0); n != 1 {
		t.Fatalf("server holds %d watches, want 1", n)
	}
	w.Close()
	waitFor(t, "the server to drop the closed watch", func() bool { return env.cluster.WatchCount(0) == 0 })
}
