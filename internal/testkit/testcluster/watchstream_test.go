package testcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// Watches are local to the member that registers them (issue 11, item 4):
// a registration on a member where the session has no event stream open is
// refused with 409 precondition_failed saying where to register, never
// accepted with events that could not reach the session's stream.

// requireNoStreamRefusal fails unless err is the refusal of a watch for
// session on member name.
func requireNoStreamRefusal(t *testing.T, err error, session, name string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodePreconditionFailed {
		t.Fatalf("registration without a stream on %s: %v, want 409 %s", name, err, api.CodePreconditionFailed)
	}
	for _, want := range []string{"session " + session + " has no event stream open on member " + name, "/v1/session/" + session + "/events"} {
		if !strings.Contains(e.Message, want) {
			t.Fatalf("refusal %q does not say %q", e.Message, want)
		}
	}
}

// TestWatchOnMemberWithoutStreamRefused: with the session's stream open on
// member A, a watch registered on member B is refused clearly and leaves
// nothing behind on B; registered on A it fires on A's stream. A session
// with no stream anywhere cannot register, and once the client closed its
// stream on A, A refuses new registrations while keeping the watches it
// accepted and their events for the session's next stream there.
func TestWatchOnMemberWithoutStreamRefused(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	a, b := c.Others(leader)[0], c.Others(leader)[1]
	s := createSession(t, ctx, c.URL(a), 30*time.Second).SessionID

	_, err := AddWatch(ctx, c.URL(a), api.WatchRequest{Path: "/x", SessionID: s})
	requireNoStreamRefusal(t, err, s, c.Nodes[a].Name)

	onA := openStream(t, c.URL(a), s)
	_, err = AddWatch(ctx, c.URL(b), api.WatchRequest{Path: "/x", SessionID: s, Persistent: true})
	requireNoStreamRefusal(t, err, s, c.Nodes[b].Name)
	onA1, err := AddWatch(ctx, c.URL(a), api.WatchRequest{Path: "/x", SessionID: s, Persistent: true})
	if err != nil {
		t.Fatalf("registration on %s, where the stream is: %v", c.Nodes[a].Name, err)
	}
	first, err := Put(ctx, c.URL(leader), "/x", "1", "")
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok := onA.Next(10 * time.Second); !ok || ev.WatchID != onA1.WatchID || ev.Index != first.ModifiedIndex {
		t.Fatalf("stream on %s: %+v (ok %v, reason %q), want watch %s at %d", c.Nodes[a].Name, ev, ok, onA.Reason(), onA1.WatchID, first.ModifiedIndex)
	}

	// B kept nothing of the refused registration: a stream opened there
	// gets the sentinel's event and nothing for /x.
	onB := openStream(t, c.URL(b), s)
	if _, err := Put(ctx, c.URL(leader), "/x", "2", ""); err != nil {
		t.Fatal(err)
	}
	sentinel := registerSentinel(t, ctx, c, b, s, c.URL(leader))
	if got := collectUntil(t, onB, sentinel, 20*time.Second); len(got) != 0 {
		t.Fatalf("the refused registration on %s fired: %v", c.Nodes[b].Name, got)
	}

	// The client closes its stream on A: once A noticed, it refuses new
	// registrations, and the watch it holds queues for the next stream.
	onA.Close()
	if !WaitFor(10*time.Second, func() bool {
		_, err := AddWatch(ctx, c.URL(a), api.WatchRequest{Path: "/probe", SessionID: s})
		return api.CodeOf(err) == api.CodePreconditionFailed
	}) {
		t.Fatalf("%s still accepts watches 10s after the client closed the session's stream there", c.Nodes[a].Name)
	}
	_, err = AddWatch(ctx, c.URL(a), api.WatchRequest{Path: "/x", SessionID: s})
	requireNoStreamRefusal(t, err, s, c.Nodes[a].Name)
	third, err := Put(ctx, c.URL(leader), "/x", "3", "")
	if err != nil {
		t.Fatal(err)
	}
	again := openStream(t, c.URL(a), s)
	for deadline := time.Now().Add(10 * time.Second); ; {
		ev, ok := again.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("the next stream on %s ended or timed out (reason %q) before the queued event at %d", c.Nodes[a].Name, again.Reason(), third.ModifiedIndex)
		}
		if ev.WatchID == onA1.WatchID && ev.Index == third.ModifiedIndex {
			break
		}
	}
}

// TestWatchManyStreamsNoneSilentlyLost: 100 sessions, each with its stream
// open on one member, each registering a watch first on another member
// (the trial: 500 streams, 0 events arrived) and then on its
// stream's member. Every registration on another member is refused; every
// accepted watch delivers the write's event to its session's stream.
func TestWatchManyStreamsNoneSilentlyLost(t *testing.T) {
	const sessions = 100
	// Hundreds of concurrent writes on a loaded machine: a long request
	// deadline, and writes refused as unavailable (outcome unknown) are
	// made again (retryUnavailable).
	c := New(t, 3, Steady(Options{RequestTimeout: 10 * time.Second}))
	ctx := ctxT(t, 90*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	type watcher struct {
		session  string
		member   int // where the stream is
		stream   *EventStream
		accepted []string // watch ids accepted, on any member
	}
	watchers := make([]*watcher, sessions)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	for i := range watchers {
		wg.Go(func() {
			w := &watcher{member: i % len(c.Nodes)}
			watchers[i] = w
			var s api.Session
			err := retryUnavailable(ctx, func() (err error) {
				s, err = CreateSession(ctx, c.URL(w.member), 60*time.Second)
				return err
			})
			if err != nil {
				fail("session %d: %v", i, err)
				return
			}
			w.session = s.SessionID
			if w.stream, err = OpenEventStream(c.URL(w.member), w.session); err != nil {
				fail("session %d: %v", i, err)
				return
			}
			other := (w.member + 1 + i%2) % len(c.Nodes)
			var elsewhere api.Watch
			err = retryUnavailable(ctx, func() (err error) {
				elsewhere, err = AddWatch(ctx, c.URL(other), api.WatchRequest{Path: "/many", SessionID: w.session})
				return err
			})
			switch {
			case err == nil:
				w.accepted = append(w.accepted, elsewhere.WatchID) // must then deliver, which it cannot
			case api.CodeOf(err) != api.CodePreconditionFailed:
				fail("session %s on %s: %v, want a refusal", w.session, c.Nodes[other].Name, err)
			}
			var here api.Watch
			err = retryUnavailable(ctx, func() (err error) {
				here, err = AddWatch(ctx, c.URL(w.member), api.WatchRequest{Path: "/many", SessionID: w.session})
				return err
			})
			if err != nil {
				fail("session %s on its stream's member %s: %v", w.session, c.Nodes[w.member].Name, err)
				return
			}
			w.accepted = append(w.accepted, here.WatchID)
		})
	}
	wg.Wait()
	defer func() {
		for _, w := range watchers {
			if w != nil && w.stream != nil {
				w.stream.Close()
			}
		}
	}()
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), failures[0])
	}
	var write api.Node
	err := retryUnavailable(ctx, func() (err error) {
		write, err = Put(ctx, c.URL(leader), "/many", "v", "")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	deadline := time.Now().Add(20 * time.Second)
	for _, w := range watchers {
		got := map[string]bool{}
		for len(got) < len(w.accepted) {
			ev, ok := w.stream.Next(time.Until(deadline))
			if !ok {
				break
			}
			if ev.Index == write.ModifiedIndex {
				got[ev.WatchID] = true
			}
		}
		for _, id := range w.accepted {
			if !got[id] {
				lost++
				t.Errorf("session %s (stream on %s): accepted watch %s never delivered the write at %d (stream reason %q)",
					w.session, c.Nodes[w.member].Name, id, write.ModifiedIndex, w.stream.Reason())
			}
		}
	}
	t.Logf("%d sessions: %d events silently lost", sessions, lost)
}

// retryUnavailable makes call until it returns anything but unavailable or
// overloaded (a write not committed within the request deadline, a member
// shedding load: the request may be made again), or ctx ends. A retried
// write whose first attempt took effect after all is one more of the same
// write; the tests using this tolerate that.
func retryUnavailable(ctx context.Context, call func() error) error {
	for {
		err := call()
		if code := api.CodeOf(err); (code != api.CodeUnavailable && code != api.CodeOverloaded) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond): // a pause between attempts, not a wait for a condition
		}
	}
}
