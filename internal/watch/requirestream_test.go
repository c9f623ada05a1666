package watch

import (
	"errors"
	"reflect"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// TestRequireStream: with Options.RequireStream a watch is accepted only
// while its session has a stream attached here; a refusal changes nothing,
// and a stream closed by its client keeps the accepted watches and their
// queued events for the session's next stream.
func TestRequireStream(t *testing.T) {
	r := New(Options{RequireStream: true})
	spec := Spec{Path: "/k", Persistent: true}
	if _, err := r.AddLocked(1, spec, 1, Current{}); !errors.Is(err, ErrNoStream) {
		t.Fatalf("Add without a stream: %v, want ErrNoStream", err)
	}
	if s := r.Stats(); s.Sessions != 0 || s.Watches != 0 || s.RefusedNoStream != 1 || s.WatchesAdded != 0 {
		t.Fatalf("stats after a refusal %+v: want nothing kept, one refusal counted", s)
	}

	first := r.Stream(1)
	id := mustAdd(t, r, 1, spec, 1, Current{})
	if _, err := r.AddLocked(2, spec, 1, Current{}); !errors.Is(err, ErrNoStream) {
		t.Fatalf("Add for another session: %v, want ErrNoStream", err)
	}
	first.Close()
	waitDone(t, first)
	if _, err := r.AddLocked(1, Spec{Path: "/j"}, 1, Current{}); !errors.Is(err, ErrNoStream) {
		t.Fatalf("Add after the client closed its stream: %v, want ErrNoStream", err)
	}
	r.PublishLocked([]fsm.Event{changed("/k", 2)}) // queued for the next stream
	second := r.Stream(1)
	defer second.Close()
	got := receive(t, second, 1)
	if got[0].Index != 2 || got[0].WatchID != api.FormatID(id) {
		t.Fatalf("next stream got %+v, want the queued event of watch %d at index 2", got, id)
	}
	mustAdd(t, r, 1, Spec{Path: "/j"}, 2, Current{})
	if s := r.Stats(); s.Watches != 2 || s.WatchesAdded != 2 || s.RefusedNoStream != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRequireStreamAfterServerEnd: a stream the server ended (replaced,
// slow consumer, session ended) no longer admits registrations; a
// replacing stream does.
func TestRequireStreamAfterServerEnd(t *testing.T) {
	tests := []struct {
		name  string
		end   func(r *Registry) // ends session 1's stream
		admit bool              // whether a registration is accepted after it
	}{
		{"replaced", func(r *Registry) { r.Stream(1) }, true},
		{"session ended", func(r *Registry) { r.SessionEnded(1) }, false},
		{"slow consumer", func(r *Registry) {
			for index := uint64(2); index < 10; index++ {
				r.PublishLocked([]fsm.Event{changed("/k", index)})
			}
		}, false},
		{"restored", func(r *Registry) { r.RestoredLocked(50) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{RequireStream: true, QueueLen: 2})
			stream := r.Stream(1)
			mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
			tt.end(r)
			waitDone(t, stream)
			_, err := r.AddLocked(1, Spec{Path: "/again"}, 60, Current{})
			if admitted := err == nil; admitted != tt.admit {
				t.Fatalf("Add after the stream ended (%q): %v; want accepted=%v", stream.Reason(), err, tt.admit)
			}
			if !tt.admit && !errors.Is(err, ErrNoStream) {
				t.Fatalf("refusal %v, want ErrNoStream", err)
			}
		})
	}
}

func TestStatsCountDroppedWatches(t *testing.T) {
	r := New(Options{QueueLen: 1})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/k", 2)}) // two events, one slot: disconnected
	want := Stats{WatchesAdded: 2, WatchesDropped: 2, SessionsDisconnected: 1, EventsFired: 1, Sessions: 1}
	if got := r.Stats(); !reflect.DeepEqual(got, want) {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}
