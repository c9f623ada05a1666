package testcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// Watch scenarios of issue 4 (checker W): every kind of watch fires on
// followers and the leader at apply time, in index order, with nothing
// missing or extra; known_index makes a watch re-registered on another node
// fire at once for what changed meanwhile; a consumer that does not read is
// disconnected with the slow-consumer reason while writes keep their pace.

// firing is what a test expects of one event, index included.
type firing struct {
	event, path string
	version     uint64
	index       uint64
}

func (f firing) String() string {
	return fmt.Sprintf("%s %s v%d @%d", f.event, f.path, f.version, f.index)
}

func firingOf(ev api.Event) firing {
	return firing{event: ev.Event, path: ev.Path, version: ev.Version, index: ev.Index}
}

// collectUntil reads stream until an event of watch sentinel arrives and
// returns the others, grouped by watch id, failing on any index going back.
func collectUntil(t *testing.T, stream *EventStream, sentinel string, timeout time.Duration) map[string][]firing {
	t.Helper()
	got := map[string][]firing{}
	var last uint64
	deadline := time.Now().Add(timeout)
	for {
		ev, ok := stream.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("stream ended or timed out before the sentinel (reason %q); got %v", stream.Reason(), got)
		}
		if ev.Index < last {
			t.Fatalf("event %+v after one at index %d: out of index order", ev, last)
		}
		last = ev.Index
		if ev.WatchID == sentinel {
			return got
		}
		got[ev.WatchID] = append(got[ev.WatchID], firingOf(ev))
	}
}

// TestWatchKinds registers exact and recursive, one-shot and persistent
// watches on a follower and on the leader, makes changes through the leader,
// and checks that each watch saw exactly its events, at the writes' indexes,
// in order. A sentinel watch fired last proves nothing more is coming (the
// stream is in index order).
func TestWatchKinds(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	url := c.URL(leader)
	if _, err := Put(ctx, url, "/k", "", "none"); err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		spec api.WatchRequest
	}{
		{"exact one-shot", api.WatchRequest{Path: "/k/a"}},
		{"exact persistent", api.WatchRequest{Path: "/k/a", Persistent: true}},
		{"recursive one-shot", api.WatchRequest{Path: "/k", Recursive: true}},
		{"recursive persistent", api.WatchRequest{Path: "/k", Recursive: true, Persistent: true}},
	}
	type watcher struct {
		node    int
		session string
		stream  *EventStream
		ids     []string // by kind
	}
	var watchers []*watcher
	for _, node := range []int{c.Others(leader)[0], c.Others(leader)[1], leader} {
		s := createSession(t, ctx, c.URL(node), 20*time.Second)
		w := &watcher{node: node, session: s.SessionID, stream: openStream(t, c.URL(node), s.SessionID)}
		for _, kind := range kinds {
			spec := kind.spec
			spec.SessionID = s.SessionID
			reg, err := AddWatch(ctx, c.URL(node), spec)
			if err != nil {
				t.Fatalf("%s on %s: %v", kind.name, c.Nodes[node].Name, err)
			}
			w.ids = append(w.ids, reg.WatchID)
		}
		watchers = append(watchers, w)
	}

	createA, _ := Put(ctx, url, "/k/a", "1", "none")
	changeA, _ := Put(ctx, url, "/k/a", "2", "1")
	createB, _ := Put(ctx, url, "/k/b", "1", "none")
	deleteA, err := SessionDelete(ctx, url, "/k/a", SessionWrite{})
	if err != nil || createA.Index == 0 || changeA.Index == 0 || createB.Index == 0 {
		t.Fatalf("writes failed: %v (indexes %d %d %d)", err, createA.Index, changeA.Index, createB.Index)
	}
	if _, err := Put(ctx, url, "/elsewhere", "x", ""); err != nil {
		t.Fatal(err)
	}
	want := [][]firing{
		{{api.EventCreated, "/k/a", 1, createA.Index}},
		{{api.EventCreated, "/k/a", 1, createA.Index}, {api.EventChanged, "/k/a", 2, changeA.Index},
			{api.EventDeleted, "/k/a", 2, deleteA.Index}},
		{{api.EventCreated, "/k/a", 1, createA.Index}},
		{{api.EventCreated, "/k/a", 1, createA.Index}, {api.EventChildrenChanged, "/k", 1, createA.Index},
			{api.EventChanged, "/k/a", 2, changeA.Index},
			{api.EventCreated, "/k/b", 1, createB.Index}, {api.EventChildrenChanged, "/k", 1, createB.Index},
			{api.EventDeleted, "/k/a", 2, deleteA.Index}, {api.EventChildrenChanged, "/k", 1, deleteA.Index}},
	}
	for _, w := range watchers {
		sentinel := registerSentinel(t, ctx, c, w.node, w.session, url)
		got := collectUntil(t, w.stream, sentinel, 20*time.Second)
		for k, kind := range kinds {
			if !sameFirings(got[w.ids[k]], want[k]) {
				t.Errorf("%s watch on %s: got %v, want %v", kind.name, c.Nodes[w.node].Name, got[w.ids[k]], want[k])
			}
		}
	}
}

// sameFirings compares firings, ignoring the version of CHILDREN_CHANGED
// (the parent's version is not part of the contract) and the order of
// events at one index.
func sameFirings(got, want []firing) bool {
	normalize := func(list []firing) []string {
		var out []string
		for _, f := range list {
			if f.event == api.EventChildrenChanged {
				f.version = 0
			}
			out = append(out, f.String())
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(normalize(got), normalize(want))
}

// registerSentinel registers a one-shot watch of a fresh path for session
// on node, fires it with a write through writeURL, and returns its id.
func registerSentinel(t *testing.T, ctx context.Context, c *Cluster, node int, session, writeURL string) string {
	t.Helper()
	path := fmt.Sprintf("/sentinels/s%d", time.Now().UnixNano())
	reg, err := AddWatch(ctx, c.URL(node), api.WatchRequest{Path: path, SessionID: session})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, writeURL, path, "", ""); err != nil {
		t.Fatal(err)
	}
	return reg.WatchID
}

// TestWatchKnownIndexAcrossNodes: a client watches on node A, sees an event
// at index L, loses its stream; changes happen; it re-registers on node B
// with known_index L and the watch fires at once. Registered with the
// current index instead, it waits for the next change.
func TestWatchKnownIndexAcrossNodes(t *testing.T) {
	tests := []struct {
		name string
		spec api.WatchRequest
		// change is made while the client is away; want is the path
		// the at-once event reports.
		change, want string
	}{
		{"exact one-shot", api.WatchRequest{Path: "/r/x"}, "/r/x", "/r/x"},
		{"exact persistent", api.WatchRequest{Path: "/r/x", Persistent: true}, "/r/x", "/r/x"},
		{"recursive persistent, change below", api.WatchRequest{Path: "/r", Recursive: true, Persistent: true}, "/r/deep/y", ""},
	}
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	a, b := c.Others(leader)[0], c.Others(leader)[1]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Put(ctx, c.URL(leader), "/r/x", "start", ""); err != nil {
				t.Fatal(err)
			}
			s := createSession(t, ctx, c.URL(a), 20*time.Second)
			onA := openStream(t, c.URL(a), s.SessionID)
			spec := tt.spec
			spec.SessionID = s.SessionID
			if _, err := AddWatch(ctx, c.URL(a), spec); err != nil {
				t.Fatal(err)
			}
			seen, err := Put(ctx, c.URL(leader), "/r/x", "seen", "")
			if err != nil {
				t.Fatal(err)
			}
			ev, ok := onA.Next(10 * time.Second)
			if !ok || ev.Index != seen.Index {
				t.Fatalf("first event on %s: %+v (ok %v), want index %d", c.Nodes[a].Name, ev, ok, seen.Index)
			}
			last := ev.Index
			onA.Close()

			missed, err := Put(ctx, c.URL(leader), tt.change, "missed", "")
			if err != nil {
				t.Fatal(err)
			}
			onB := openStream(t, c.URL(b), s.SessionID)
			spec.KnownIndex = last
			reg, err := AddWatch(ctx, c.URL(b), spec)
			if err != nil {
				t.Fatal(err)
			}
			ev, ok = onB.Next(10 * time.Second)
			if !ok || ev.WatchID != reg.WatchID || ev.Index <= last || ev.Index < min(missed.Index, reg.Index) {
				t.Fatalf("re-registered on %s with known_index %d (change at %d, registered at %d): got %+v (ok %v); want it to fire at once",
					c.Nodes[b].Name, last, missed.Index, reg.Index, ev, ok)
			}
			if tt.want != "" && (ev.Path != tt.want || ev.Version != missed.Version) {
				t.Fatalf("at-once event %+v, want %s at version %d", ev, tt.want, missed.Version)
			}

			// Up to date: no event until the next change.
			spec.KnownIndex = max(reg.Index, missed.Index)
			spec.Persistent = false
			control, err := AddWatch(ctx, c.URL(b), spec)
			if err != nil {
				t.Fatal(err)
			}
			next, err := Put(ctx, c.URL(leader), tt.change, "next", "")
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, ok := onB.Next(10 * time.Second)
				if !ok {
					t.Fatal("no event for the next change")
				}
				if ev.WatchID == control.WatchID {
					if ev.Index != next.Index {
						t.Fatalf("an up-to-date watch fired with %+v, want the next change at %d", ev, next.Index)
					}
					break
				}
			}
		})
	}
}

// openStream opens session's event stream on base and closes it at the end.
func openStream(t *testing.T, base, session string) *EventStream {
	t.Helper()
	stream, err := OpenEventStream(base, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stream.Close)
	return stream
}

// writeRate puts fresh keys under prefix through base from workers
// goroutines for d and returns the acknowledged writes per second. Failed
// writes (a leader change) count for nothing; none succeeding is an error.
func writeRate(ctx context.Context, base, prefix string, workers int, d time.Duration) (float64, error) {
	var count atomic.Int64
	var lastErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; time.Now().Before(stop); seq++ {
				if _, err := Put(ctx, base, fmt.Sprintf("%s/w%d-%d", prefix, g, seq), "v", ""); err != nil {
					lastErr.Store(err)
					continue
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := lastErr.Load().(error); err != nil && count.Load() == 0 {
		return 0, err
	}
	return float64(count.Load()) / d.Seconds(), nil
}

// TestSlowConsumerDisconnected: a session's stream that nobody reads, on a
// follower, with many persistent recursive watches (each write fans out to
// hundreds of events) is disconnected with the slow-consumer reason, and
// writes through the leader keep their pace meanwhile.
func TestSlowConsumerDisconnected(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := c.Others(leader)[0]
	const watches, workers, phase = 100, 8, 2 * time.Second

	before, err := writeRate(ctx, c.URL(leader), "/base", workers, phase)
	if err != nil {
		t.Fatal(err)
	}
	s := createSession(t, ctx, c.URL(follower), 20*time.Second)
	stuck, err := OpenStuckStream(c.URL(follower), s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	for range watches {
		spec := api.WatchRequest{Path: "/slow", Recursive: true, Persistent: true, SessionID: s.SessionID}
		if _, err := AddWatch(ctx, c.URL(follower), spec); err != nil {
			t.Fatal(err)
		}
	}
	during, err := writeRate(ctx, c.URL(leader), "/slow", workers, phase)
	if err != nil {
		t.Fatal(err)
	}
	// Each write makes 2 events per watch: far more than the queue holds.
	events, reason, err := stuck.Drain(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writes/s: %.0f before, %.0f with the stuck consumer; it got %d events before: %s", before, during, events, reason)
	if !strings.Contains(reason, "slow consumer") {
		t.Fatalf("stream ended with %q, want the slow-consumer reason", reason)
	}
	if want := int(during * phase.Seconds() * 2 * watches); events >= want {
		t.Fatalf("the stuck consumer got all %d events: it was not disconnected", events)
	}
	if during < before/4 {
		t.Fatalf("writes slowed from %.0f/s to %.0f/s while a consumer was stuck", before, during)
	}
	// The follower still serves the session: a new stream works, and a
	// watch registered again fires on it.
	stream := openStream(t, c.URL(follower), s.SessionID)
	again, err := AddWatch(ctx, c.URL(follower), api.WatchRequest{Path: "/after", SessionID: s.SessionID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, c.URL(leader), "/after", "v", ""); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ev, ok := stream.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("the new stream after the disconnect ended or timed out (reason %q) before the event of watch %s", stream.Reason(), again.WatchID)
		}
		if ev.WatchID == again.WatchID {
			break
		}
	}
	c.EnsureSame(15 * time.Second)
}
