package watch

import (
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/fsm"
)

// TestTokenExpiryEndsItsWatches: at its token's expiry a watch ends: the
// event it fired before and nobody received is never sent, the session's
// stream ends with ReasonTokenExpired, and the same session's watch with no
// expiry keeps its queued events for the next stream, as does another
// session's watch, whose stream goes on. One timer serves every watch of a
// token; a registration already past its expiry is refused.
func TestTokenExpiryEndsItsWatches(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := New(Options{Clock: fake})
	expires := fake.Now().Add(2 * time.Second)
	token := Spec{Path: "/app", Recursive: true, Persistent: true, Expires: expires, Credential: "digest"}
	plain := Spec{Path: "/app", Recursive: true, Persistent: true}

	first := r.Stream(1)
	expiring := mustAdd(t, r, 1, token, 1, Current{})
	mustAdd(t, r, 1, token, 1, Current{}) // a second watch of the token
	kept := mustAdd(t, r, 1, plain, 1, Current{})
	other := r.Stream(2)
	defer other.Close()
	mustAdd(t, r, 2, plain, 1, Current{})
	if n := len(r.credentials); n != 1 {
		t.Fatalf("%d credential timers for one token, want 1", n)
	}

	r.PublishLocked([]fsm.Event{changed("/app/before", 2)})
	got := receive(t, first, 3)
	for _, e := range got {
		if e.Index != 2 {
			t.Fatalf("before the expiry got %+v, want the three watches' events at index 2", got)
		}
	}
	receive(t, other, 1)

	// Fired before the expiry and not received: the expired watch's must
	// never be sent, the plain watch's must wait for the next stream.
	r.PublishLocked([]fsm.Event{changed("/app/unread", 3)})
	waitQueued(t, r, 1, 3)
	fake.Advance(2 * time.Second)
	if reason := waitDone(t, first); reason != ReasonTokenExpired {
		t.Fatalf("stream ended with %q, want %q", reason, ReasonTokenExpired)
	}
	if s := r.Stats(); s.Watches != 2 || s.WatchesExpired != 2 || len(r.credentials) != 0 {
		t.Fatalf("after the expiry: stats %+v, %d credentials; want the two watches of the token gone", s, len(r.credentials))
	}
	r.PublishLocked([]fsm.Event{changed("/app/after", 4)})
	receive(t, other, 2) // /app/unread, /app/after: the other session's stream goes on

	next := r.Stream(1)
	defer next.Close()
	got = receive(t, next, 2)
	for _, e := range got {
		if e.WatchID != api.FormatID(kept) {
			t.Errorf("next stream delivered %+v; want only watch %s's (the expired %s's are never sent)", e, api.FormatID(kept), api.FormatID(expiring))
		}
	}
	if indexes(got)[0] != 3 || indexes(got)[1] != 4 {
		t.Errorf("next stream delivered indexes %v, want [3 4]", indexes(got))
	}
	if _, err := r.AddLocked(1, token, 4, Current{}); !isCode(err, api.CodeUnauthenticated) {
		t.Fatalf("registration past the expiry: %v, want unauthenticated", err)
	}
}

// TestTokenExpiryTimerStopsWithLastWatch: cancelling the last watch of a
// token stops its timer, so the expiry ends no stream.
func TestTokenExpiryTimerStopsWithLastWatch(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := New(Options{Clock: fake})
	stream := r.Stream(1)
	defer stream.Close()
	id := mustAdd(t, r, 1, Spec{Path: "/a", Persistent: true, Expires: fake.Now().Add(time.Second), Credential: "d"}, 1, Current{})
	if err := r.Cancel(1, id); err != nil {
		t.Fatal(err)
	}
	if len(r.credentials) != 0 {
		t.Fatal("the token's timer outlived its last watch")
	}
	fake.Advance(2 * time.Second)
	select {
	case <-stream.Done():
		t.Fatalf("stream ended (%q) at the expiry of a token with no watch", stream.Reason())
	default:
	}
}

// TestTokenExpiryEndsEveryShardsRecord: a watch with records in two shards
// ends in both at its token's expiry: past it, neither shard's events fire it.
func TestTokenExpiryEndsEveryShardsRecord(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := New(Options{Clock: fake, Shards: 2})
	stream := r.Stream(1)
	spec := Spec{Path: "/app", Recursive: true, Persistent: true, Expires: fake.Now().Add(time.Second), Credential: "d"}
	id, err := r.Shard(0).AddLocked(1, spec, 1, Current{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Shard(1).ExtendLocked(1, id, spec, 1, Current{Elsewhere: true}) {
		t.Fatal("ExtendLocked: the watch is gone")
	}
	r.Shard(1).PublishLocked([]fsm.Event{changed("/app/b", 2)})
	receive(t, stream, 1)
	fake.Advance(time.Second)
	if reason := waitDone(t, stream); reason != ReasonTokenExpired {
		t.Fatalf("stream ended with %q, want %q", reason, ReasonTokenExpired)
	}
	takeNothing(t, stream)
	next := r.Stream(1)
	defer next.Close()
	r.Shard(0).PublishLocked([]fsm.Event{changed("/app/a", 3)})
	r.Shard(1).PublishLocked([]fsm.Event{changed("/app/b", 3)})
	if s := r.Stats(); s.Watches != 0 || s.Queued != 0 {
		t.Fatalf("after the expiry: stats %+v, want no watch and nothing queued", s)
	}
}

// TestTakeDropsExpiredWatchesEvents: Take never hands over
// an event queued for a watch whose token has expired since; the session's
// other watch's event goes to its next stream.
func TestTakeDropsExpiredWatchesEvents(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := New(Options{Clock: fake})
	first := r.Stream(1)
	mustAdd(t, r, 1, Spec{Path: "/app", Persistent: true, Expires: fake.Now().Add(time.Second), Credential: "d"}, 1, Current{})
	kept := mustAdd(t, r, 1, Spec{Path: "/app", Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/app", 2)})
	waitQueued(t, r, 1, 2)
	fake.Advance(time.Second)
	if reason := waitDone(t, first); reason != ReasonTokenExpired {
		t.Fatalf("stream ended with %q, want %q", reason, ReasonTokenExpired)
	}
	next := r.Stream(1)
	defer next.Close()
	got := receive(t, next, 1)
	if got[0].WatchID != api.FormatID(kept) || got[0].Index != 2 {
		t.Fatalf("next stream took %+v, want watch %s's event at index 2", got[0], api.FormatID(kept))
	}
	if n, _ := next.Take(make([]Delivery, 2)); n != 0 {
		t.Fatalf("took %d events more", n)
	}
	if s := r.Stats(); s.Queued != 0 || s.EventsDelivered != 1 {
		t.Fatalf("stats %+v, want nothing queued and one event delivered", s)
	}
}
