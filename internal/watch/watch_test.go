package watch

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

func TestMatching(t *testing.T) {
	tests := []struct {
		name      string
		watch     string
		recursive bool
		event     string
		want      bool
	}{
		{"exact on itself", "/a", false, "/a", true},
		{"exact not on child", "/a", false, "/a/b", false},
		{"exact not on parent", "/a/b", false, "/a", false},
		{"exact not on sibling prefix", "/a", false, "/ab", false},
		{"exact root on root", "/", false, "/", true},
		{"exact root not on child", "/", false, "/a", false},
		{"recursive on itself", "/a", true, "/a", true},
		{"recursive on child", "/a", true, "/a/b", true},
		{"recursive on grandchild", "/a", true, "/a/b/c", true},
		{"recursive not on parent", "/a/b", true, "/a", false},
		{"recursive not on sibling prefix", "/a", true, "/ab", false},
		{"recursive not on sibling prefix child", "/a", true, "/ab/c", false},
		{"recursive deep not on sibling prefix", "/a/b", true, "/a/bc", false},
		{"recursive longer watch not on shorter", "/ab", true, "/a", false},
		{"recursive not on root", "/a", true, "/", false},
		{"recursive root on root", "/", true, "/", true},
		{"recursive root on anything", "/", true, "/x/y/z", true},
	}
	kinds := []fsm.EventKind{fsm.EventCreated, fsm.EventChanged, fsm.EventDeleted, fsm.EventChildrenChanged}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := matches(tt.watch, tt.recursive, tt.event); got != tt.want {
				t.Fatalf("matches(%q, %v, %q) = %v, want %v", tt.watch, tt.recursive, tt.event, got, tt.want)
			}
			for _, kind := range kinds {
				r := New(Options{})
				mustAdd(t, r, 1, Spec{Path: tt.watch, Recursive: tt.recursive}, 1, Current{})
				r.PublishLocked([]fsm.Event{event(kind, tt.event, 3, 2)})
				got := pending(r, 1)
				if fired := len(got) == 1; fired != tt.want {
					t.Fatalf("%v on %q: fired %v (%v), want %v", kind, tt.event, fired, got, tt.want)
				}
				if tt.want && (got[0].Event != kind.String() || got[0].Path != tt.event || got[0].Version != 3 || got[0].Index != 2) {
					t.Fatalf("event %+v, want %v %s version 3 index 2", got[0], kind, tt.event)
				}
			}
		})
	}
}

func TestOneShotAndPersistent(t *testing.T) {
	tests := []struct {
		name       string
		persistent bool
		wantIndex  []uint64
		wantLeft   int
	}{
		{"one-shot fires once", false, []uint64{2}, 0},
		{"persistent fires for every change", true, []uint64{2, 3, 4, 6}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{})
			id := mustAdd(t, r, 1, Spec{Path: "/k", Persistent: tt.persistent}, 1, Current{Exists: true, Version: 1})
			r.PublishLocked([]fsm.Event{changed("/k", 2), changed("/k", 3)})
			r.PublishLocked([]fsm.Event{changed("/k", 4), changed("/other", 5)})
			r.PublishLocked([]fsm.Event{event(fsm.EventDeleted, "/k", 6, 6)})
			got := pending(r, 1)
			if !reflect.DeepEqual(indexes(got), tt.wantIndex) {
				t.Fatalf("indexes %v, want %v", indexes(got), tt.wantIndex)
			}
			for _, e := range got {
				if e.WatchID != api.FormatID(id) {
					t.Fatalf("watch id %s, want %s", e.WatchID, api.FormatID(id))
				}
			}
			if n := r.Stats().Watches; n != tt.wantLeft {
				t.Fatalf("%d watches left, want %d", n, tt.wantLeft)
			}
			err := r.Cancel(1, id)
			if wantFound := tt.wantLeft == 1; (err == nil) != wantFound || (err != nil && !isCode(err, api.CodeNotFound)) {
				t.Fatalf("Cancel: %v", err)
			}
			r.PublishLocked([]fsm.Event{changed("/k", 7)})
			if n := len(pending(r, 1)); n != len(tt.wantIndex) {
				t.Fatalf("%d events after cancel, want %d", n, len(tt.wantIndex))
			}
		})
	}
}

func TestOrderingAcrossWatches(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/a", Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/b", Recursive: true}, 1, Current{})
	mustAdd(t, r, 2, Spec{Path: "/b/c"}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/b/c", 2), changed("/a", 3)})
	r.PublishLocked([]fsm.Event{
		event(fsm.EventCreated, "/a/x", 1, 4), event(fsm.EventChildrenChanged, "/a", 3, 4),
		changed("/b/c", 5),
	})
	r.PublishLocked([]fsm.Event{changed("/a", 6)})
	got := pending(r, 1)
	want := []struct {
		index uint64
		path  string
	}{{2, "/b/c"}, {2, "/b/c"}, {3, "/a"}, {3, "/a"}, {4, "/a/x"}, {4, "/a"}, {4, "/a"}, {5, "/b/c"}, {6, "/a"}, {6, "/a"}}
	if len(got) != len(want) {
		t.Fatalf("got %d events %v, want %d", len(got), got, len(want))
	}
	for i, e := range got {
		if e.Index != want[i].index || e.Path != want[i].path {
			t.Fatalf("event %d is %+v, want index %d path %s", i, e, want[i].index, want[i].path)
		}
	}
	if got := indexes(pending(r, 2)); !reflect.DeepEqual(got, []uint64{2}) {
		t.Fatalf("session 2 got %v, want [2]", got)
	}
}

func TestOneEventPerWatchPathAndIndex(t *testing.T) {
	sessionExpiry := []fsm.Event{ // two ephemeral children of /p deleted in one entry
		event(fsm.EventDeleted, "/p/e1", 1, 7), event(fsm.EventChildrenChanged, "/p", 1, 7),
		event(fsm.EventDeleted, "/p/e2", 1, 7), event(fsm.EventChildrenChanged, "/p", 1, 7),
	}
	recursiveDelete := []fsm.Event{
		event(fsm.EventDeleted, "/a/b/c", 1, 7), event(fsm.EventDeleted, "/a/b", 1, 7),
		event(fsm.EventDeleted, "/a", 2, 7), event(fsm.EventChildrenChanged, "/", 0, 7),
	}
	tests := []struct {
		name   string
		events []fsm.Event
		spec   Spec
		want   []string
	}{
		{"exact parent once", sessionExpiry, Spec{Path: "/p", Persistent: true}, []string{"CHILDREN_CHANGED /p"}},
		{"recursive parent each path once", sessionExpiry, Spec{Path: "/p", Recursive: true, Persistent: true},
			[]string{"DELETED /p/e1", "CHILDREN_CHANGED /p", "DELETED /p/e2"}},
		{"recursive root each path once", sessionExpiry, Spec{Path: "/", Recursive: true, Persistent: true},
			[]string{"DELETED /p/e1", "CHILDREN_CHANGED /p", "DELETED /p/e2"}},
		{"one-shot recursive once", sessionExpiry, Spec{Path: "/p", Recursive: true}, []string{"DELETED /p/e1"}},
		{"recursive delete subtree", recursiveDelete, Spec{Path: "/a", Recursive: true, Persistent: true},
			[]string{"DELETED /a/b/c", "DELETED /a/b", "DELETED /a"}},
		{"recursive delete exact", recursiveDelete, Spec{Path: "/a/b", Persistent: true}, []string{"DELETED /a/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{})
			mustAdd(t, r, 1, tt.spec, 6, Current{})
			r.PublishLocked(tt.events)
			var got []string
			for _, e := range pending(r, 1) {
				got = append(got, e.Event+" "+e.Path)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKnownIndex(t *testing.T) {
	// The history: /a changed at 5; /b/c created at 8; /d deleted at 10.
	history := []fsm.Event{
		event(fsm.EventChanged, "/a", 2, 5),
		event(fsm.EventCreated, "/b/c", 1, 8), event(fsm.EventChildrenChanged, "/b", 1, 8),
		event(fsm.EventDeleted, "/d", 4, 10), event(fsm.EventChildrenChanged, "/", 0, 10),
	}
	const at = 12
	a := Current{Exists: true, Version: 2, CreatedIndex: 3, ModifiedIndex: 5}
	b := Current{Exists: true, Version: 1, CreatedIndex: 2, ModifiedIndex: 2}
	gone := Current{}
	tests := []struct {
		name    string
		spec    Spec
		current Current
		want    string // "" = does not fire at once; else "KIND path version"
	}{
		{"changed after known fires", Spec{Path: "/a", KnownIndex: 4}, a, "CHANGED /a 2"},
		{"changed at known does not fire", Spec{Path: "/a", KnownIndex: 5}, a, ""},
		{"known at applied index does not fire", Spec{Path: "/a", KnownIndex: at}, a, ""},
		{"no known index does not fire", Spec{Path: "/a"}, a, ""},
		{"children changed seen through history", Spec{Path: "/b", KnownIndex: 7}, b, "CHILDREN_CHANGED /b 1"},
		{"recursive child creation", Spec{Path: "/b", Recursive: true, KnownIndex: 7}, b, "CHILDREN_CHANGED /b 1"},
		{"recursive names the changed descendant", Spec{Path: "/b/c", Recursive: true, KnownIndex: 7}, Current{Exists: true, Version: 1, CreatedIndex: 8, ModifiedIndex: 8}, "CREATED /b/c 1"},
		{"recursive unchanged subtree", Spec{Path: "/b", Recursive: true, KnownIndex: 8}, b, ""},
		{"deletion seen through history", Spec{Path: "/d", KnownIndex: 9}, gone, "DELETED /d 4"},
		{"deletion before known", Spec{Path: "/d", KnownIndex: 10}, gone, ""},
		{"never existed", Spec{Path: "/never", KnownIndex: 4}, gone, ""},
		{"before the history fires conservatively", Spec{Path: "/never", KnownIndex: 3}, gone, "DELETED /never 0"},
		{"recursive root sees everything", Spec{Path: "/", Recursive: true, KnownIndex: 9}, Current{Exists: true}, "CHILDREN_CHANGED / 0"},
		{"sibling prefix not matched", Spec{Path: "/b/cc", Recursive: true, KnownIndex: 7}, gone, ""},
	}
	for _, tt := range tests {
		for _, persistent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/persistent=%v", tt.name, persistent), func(t *testing.T) {
				r := New(Options{})
				r.PublishLocked(history)
				spec := tt.spec
				spec.Persistent = persistent
				id := mustAdd(t, r, 1, spec, at, tt.current)
				got := pending(r, 1)
				if tt.want == "" {
					if len(got) != 0 {
						t.Fatalf("fired at once: %v", got)
					}
				} else {
					if len(got) != 1 {
						t.Fatalf("got %v, want one event %s", got, tt.want)
					}
					e := got[0]
					if s := fmt.Sprintf("%s %s %d", e.Event, e.Path, e.Version); s != tt.want || e.Index != at || e.WatchID != api.FormatID(id) {
						t.Fatalf("got %+v, want %s at index %d", e, tt.want, at)
					}
				}
				wantLeft := 1
				if tt.want != "" && !persistent {
					wantLeft = 0
				}
				if n := r.Stats().Watches; n != wantLeft {
					t.Fatalf("%d watches registered, want %d", n, wantLeft)
				}
			})
		}
	}
}

func TestKnownIndexBeyondHistory(t *testing.T) {
	exists := Current{Exists: true, Version: 7, CreatedIndex: 1, ModifiedIndex: 1}
	tests := []struct {
		name    string
		setup   func(r *Registry)
		known   uint64
		at      uint64
		current Current
		want    string
	}{
		{"history evicted fires conservatively", func(r *Registry) {
			r.PublishLocked([]fsm.Event{changed("/x", 5), changed("/y", 6), changed("/z", 7)}) // ring of 2: 5 evicted
		}, 4, 8, exists, "CHANGED /k 7"},
		{"history evicted deleted node", func(r *Registry) {
			r.PublishLocked([]fsm.Event{changed("/x", 5), changed("/y", 6), changed("/z", 7)})
		}, 4, 8, Current{}, "DELETED /k 0"},
		{"history still covering does not fire", func(r *Registry) {
			r.PublishLocked([]fsm.Event{changed("/x", 5), changed("/y", 6), changed("/z", 7)})
		}, 5, 8, exists, ""},
		{"nothing published yet fires conservatively", func(r *Registry) {}, 4, 8, exists, "CHANGED /k 7"},
		{"restored snapshot beyond known fires", func(r *Registry) { r.RestoredLocked(100) }, 50, 120, exists, "CHANGED /k 7"},
		{"restored snapshot at known does not fire", func(r *Registry) { r.RestoredLocked(100) }, 100, 120, exists, ""},
		{"current shows change although history is short", func(r *Registry) { r.RestoredLocked(100) },
			50, 120, Current{Exists: true, Version: 9, CreatedIndex: 1, ModifiedIndex: 110}, "CHANGED /k 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{HistoryLen: 2})
			tt.setup(r)
			mustAdd(t, r, 1, Spec{Path: "/k", KnownIndex: tt.known}, tt.at, tt.current)
			var got string
			if events := pending(r, 1); len(events) > 0 {
				e := events[0]
				if e.Index != tt.at {
					t.Fatalf("index %d, want %d", e.Index, tt.at)
				}
				got = fmt.Sprintf("%s %s %d", e.Event, e.Path, e.Version)
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKnownIndexAheadOfServer(t *testing.T) {
	// A client that saw index 20 elsewhere registers on a server at 12.
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/k", KnownIndex: 20, Persistent: true}, 12, Current{Exists: true})
	r.PublishLocked([]fsm.Event{changed("/k", 15), changed("/k", 20), changed("/k", 21)})
	if got := indexes(pending(r, 1)); !reflect.DeepEqual(got, []uint64{21}) {
		t.Fatalf("got %v, want [21]", got)
	}
}

func TestPersistentFiredAtOnceKeepsFiring(t *testing.T) {
	r := New(Options{})
	r.PublishLocked([]fsm.Event{changed("/k", 5)})
	mustAdd(t, r, 1, Spec{Path: "/k", KnownIndex: 3, Persistent: true}, 6, Current{Exists: true, Version: 5, ModifiedIndex: 5})
	r.PublishLocked([]fsm.Event{changed("/k", 7)})
	if got := indexes(pending(r, 1)); !reflect.DeepEqual(got, []uint64{6, 7}) {
		t.Fatalf("got %v, want [6 7]", got)
	}
}

func TestAddLimitsAndErrors(t *testing.T) {
	r := New(Options{MaxPerSession: 2})
	mustAdd(t, r, 1, Spec{Path: "/a"}, 1, Current{})
	second := mustAdd(t, r, 1, Spec{Path: "/b"}, 1, Current{})
	if _, err := r.AddLocked(1, Spec{Path: "/c"}, 1, Current{}); !isCode(err, api.CodeOverloaded) {
		t.Fatalf("third watch: %v, want overloaded", err)
	}
	mustAdd(t, r, 2, Spec{Path: "/c"}, 1, Current{}) // the limit is per session
	if err := r.Cancel(1, second); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	mustAdd(t, r, 1, Spec{Path: "/c"}, 1, Current{})
	for _, path := range []string{"", "a", "/a/", "/a//b", "/a/../b"} {
		if _, err := r.AddLocked(1, Spec{Path: path}, 1, Current{}); !isCode(err, api.CodeInvalidArgument) {
			t.Fatalf("path %q: %v, want invalid_argument", path, err)
		}
	}
	if err := r.Cancel(3, 1); !isCode(err, api.CodeNotFound) {
		t.Fatalf("Cancel of an unknown session: %v", err)
	}
	if err := r.Cancel(2, second); !isCode(err, api.CodeNotFound) {
		t.Fatalf("Cancel of another session's watch: %v", err)
	}
}

func TestStreamDeliversQueuedThenLive(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/a", 2), changed("/b", 3)})
	stream := r.Stream(1)
	defer stream.Close()
	r.PublishLocked([]fsm.Event{changed("/c", 4)})
	got := receive(t, stream, 3)
	if !reflect.DeepEqual(indexes(got), []uint64{2, 3, 4}) {
		t.Fatalf("got %v", got)
	}
	if got[2].Event != api.EventChanged || got[2].Path != "/c" {
		t.Fatalf("event %+v", got[2])
	}
	waitQueued(t, r, 1, 0)
	if s := r.Stats(); s.EventsDelivered != 3 || s.EventsFired != 3 || s.Streams != 1 || s.Queued != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStreamReplacement(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/k", 2), changed("/k", 3), changed("/k", 4)})
	old := r.Stream(1)
	if got := receive(t, old, 1); got[0].Index != 2 {
		t.Fatalf("first event %+v", got[0])
	}
	replacement := r.Stream(1)
	defer replacement.Close()
	if reason := waitDone(t, old); reason != ReasonReplaced {
		t.Fatalf("old stream reason %q", reason)
	}
	// What the old consumer did not take goes to the new one, once.
	takeNothing(t, old)
	r.PublishLocked([]fsm.Event{changed("/k", 5)})
	got := receive(t, replacement, 3)
	if !reflect.DeepEqual(indexes(got), []uint64{3, 4, 5}) {
		t.Fatalf("after replacement got %v, want [3 4 5]", indexes(got))
	}
	if replacement.Reason() != "" {
		t.Fatalf("open stream has reason %q", replacement.Reason())
	}
}

func TestStreamCloseKeepsWatches(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	first := r.Stream(1)
	first.Close()
	if reason := waitDone(t, first); reason != ReasonClosed {
		t.Fatalf("reason %q", reason)
	}
	takeNothing(t, first)
	r.PublishLocked([]fsm.Event{changed("/k", 2)})
	second := r.Stream(1)
	defer second.Close()
	if got := receive(t, second, 1); got[0].Index != 2 {
		t.Fatalf("got %+v", got)
	}
}

func TestSessionEnded(t *testing.T) {
	r := New(Options{})
	id := mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true}, 1, Current{})
	mustAdd(t, r, 2, Spec{Path: "/k"}, 1, Current{})
	stream := r.Stream(1)
	r.PublishLocked([]fsm.Event{changed("/k", 2), changed("/k", 3)})
	r.SessionEnded(1)
	if reason := waitDone(t, stream); reason != ReasonSessionEnded {
		t.Fatalf("reason %q", reason)
	}
	takeNothing(t, stream)
	if err := r.Cancel(1, id); !isCode(err, api.CodeNotFound) {
		t.Fatalf("Cancel after SessionEnded: %v", err)
	}
	r.PublishLocked([]fsm.Event{changed("/k", 4)})
	if got := pending(r, 1); len(got) != 0 {
		t.Fatalf("events after SessionEnded: %v", got)
	}
	if s := r.Stats(); s.Watches != 0 || s.Sessions != 1 || s.Queued != 1 {
		t.Fatalf("stats %+v (want only session 2's fired event)", s)
	}
	r.SessionEnded(2)
	r.SessionEnded(3) // unknown: no-op
	if s := r.Stats(); s.Sessions != 0 || s.Queued != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSlowConsumerDisconnected(t *testing.T) {
	const queueLen = 16
	r := New(Options{QueueLen: queueLen})
	mustAdd(t, r, 1, Spec{Path: "/hot", Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	mustAdd(t, r, 2, Spec{Path: "/hot"}, 1, Current{}) // a healthy session keeps its watch
	stuck := r.Stream(1)                               // never read
	defer stuck.Close()

	const total = 1_000_000
	events := make([]fsm.Event, 0, 1000)
	index := uint64(1)
	start := time.Now()
	for published := 0; published < total; published += len(events) {
		events = events[:0]
		for range 1000 {
			index++
			events = append(events, changed("/other", index))
		}
		r.PublishLocked(events)
	}
	elapsed := time.Since(start)
	t.Logf("published %d events with a stuck consumer in %v (%.0f ns/event)", total, elapsed, float64(elapsed.Nanoseconds())/total)
	if elapsed > waitTimeout {
		t.Fatalf("publishing %d events took %v: a stuck consumer slowed apply", total, elapsed)
	}

	reason := waitDone(t, stuck)
	if !strings.HasPrefix(reason, "slow consumer: ") || !strings.HasSuffix(reason, " events undelivered; re-register with known_index") {
		t.Fatalf("reason %q", reason)
	}
	if want := slowConsumerReason(queueLen + 1); reason != want {
		t.Fatalf("reason %q, want %q", reason, want)
	}
	s := r.Stats()
	if s.Watches != 1 || s.SessionsDisconnected != 1 {
		t.Fatalf("stats %+v: want session 1's watches dropped, session 2's kept", s)
	}
	if got := pending(r, 1); len(got) != 0 {
		t.Fatalf("queue not reset: %d events", len(got))
	}
	r.PublishLocked([]fsm.Event{changed("/hot", index+1)})
	if got := pending(r, 2); len(got) != 1 {
		t.Fatalf("healthy session got %v", got)
	}
}

func TestSlowConsumerWithoutStream(t *testing.T) {
	r := New(Options{QueueLen: 4})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	for index := uint64(2); index < 10; index++ {
		r.PublishLocked([]fsm.Event{changed("/k", index)})
	}
	stream := r.Stream(1)
	if reason := waitDone(t, stream); reason != slowConsumerReason(5) {
		t.Fatalf("reason %q", reason)
	}
	if s := r.Stats(); s.Watches != 0 || s.Sessions != 0 {
		t.Fatalf("stats %+v", s)
	}
	next := r.Stream(1) // the reason is reported once
	defer next.Close()
	if next.Reason() != "" {
		t.Fatalf("second stream ended: %q", next.Reason())
	}
}

func TestRestoredDisconnectsWatchers(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	stream := r.Stream(1)
	r.RestoredLocked(50)
	if reason := waitDone(t, stream); reason != ReasonRestored {
		t.Fatalf("reason %q", reason)
	}
	if s := r.Stats(); s.Watches != 0 {
		t.Fatalf("stats %+v", s)
	}
	stream.Close() // the consumer's close frees the emptied record
	if s := r.Stats(); s.Sessions != 0 {
		t.Fatalf("after Close: stats %+v, want no session record", s)
	}
}

// TestReplacementWhileTheOldConsumerTakes: a stream replaced while its
// consumer is taking, in another goroutine, hands over with its successor
// every event once, in order. Rounds vary where the replacement lands.
func TestReplacementWhileTheOldConsumerTakes(t *testing.T) {
	const events = 40
	for round := range 200 {
		r := New(Options{})
		mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
		batch := make([]fsm.Event, 0, events)
		for i := range events {
			batch = append(batch, changed("/k", uint64(2+i)))
		}
		r.PublishLocked(batch)
		old := r.Stream(1)
		oldGot := make(chan []api.Event)
		go func() {
			var got []api.Event
			into := make([]Delivery, 1+round%3)
			for {
				n, ended := old.Take(into)
				for _, d := range into[:n] {
					got = append(got, d.Event())
				}
				if ended {
					oldGot <- got
					return
				}
				runtime.Gosched()
			}
		}()
		for range round % 7 {
			runtime.Gosched()
		}
		replacement := r.Stream(1)
		got := <-oldGot
		got = append(got, receive(t, replacement, events-len(got))...)
		want := make([]uint64, events)
		for i := range want {
			want[i] = uint64(2 + i)
		}
		if ix := indexes(got); !reflect.DeepEqual(ix, want) {
			t.Fatalf("round %d: the two streams handed over %v, want 2..%d once each, in order", round, ix, events+1)
		}
		if n, _ := replacement.Take(make([]Delivery, 1)); n != 0 {
			t.Fatalf("round %d: %d events more than were published", round, n)
		}
		replacement.Close()
	}
}

func TestPublishWithoutMatchAllocatesNothing(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/other", Persistent: true}, 1, Current{})
	mustAdd(t, r, 1, Spec{Path: "/svc/x", Recursive: true, Persistent: true}, 1, Current{})
	events := []fsm.Event{changed("/svc/config/db", 0), event(fsm.EventChildrenChanged, "/svc/config", 1, 0)}
	index := uint64(1)
	allocs := testing.AllocsPerRun(1000, func() {
		index++
		events[0].Index, events[1].Index = index, index
		r.PublishLocked(events)
	})
	if allocs != 0 {
		t.Fatalf("Publish without a matching watch allocates %.1f times", allocs)
	}
}

func TestFireAtOnceIntoFullQueueDisconnects(t *testing.T) {
	r := New(Options{QueueLen: 2})
	mustAdd(t, r, 1, Spec{Path: "/k", Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/k", 2), changed("/k", 3)})
	mustAdd(t, r, 1, Spec{Path: "/j", KnownIndex: 1, Persistent: true}, 3, Current{Exists: true, ModifiedIndex: 3})
	if s := r.Stats(); s.Watches != 0 || s.SessionsDisconnected != 1 || s.Queued != 0 {
		t.Fatalf("stats %+v: want the session disconnected and the new watch not kept", s)
	}
	stream := r.Stream(1)
	if reason := waitDone(t, stream); reason != slowConsumerReason(3) {
		t.Fatalf("reason %q", reason)
	}
}
