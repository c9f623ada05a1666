package watch

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/fsm"
)

// TestTakeDeliversInOrderAndCounts: Take moves the queued events, oldest
// first, at most len(into) at a time; they leave the queue
// and count as delivered and received.
func TestTakeDeliversInOrderAndCounts(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/a", 2), changed("/b", 3), changed("/c", 4)})
	stream := r.Stream(1)
	defer stream.Close()
	into := make([]Delivery, 2)
	if n, ended := stream.Take(into); n != 2 || ended {
		t.Fatalf("Take = %d, %v; want 2, false", n, ended)
	}
	if into[0].Event().Index != 2 || into[1].Event().Index != 3 {
		t.Fatalf("took %+v, %+v; want indexes 2 and 3", into[0].Event(), into[1].Event())
	}
	if got := stream.Backlog(); got != 3 {
		t.Fatalf("Backlog after taking 2 of 3 = %d, want 3", got)
	}
	r.PublishLocked([]fsm.Event{changed("/d", 5)})
	select {
	case <-stream.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("Ready did not signal a queued event")
	}
	if got := indexes(receive(t, stream, 2)); !reflect.DeepEqual(got, []uint64{4, 5}) {
		t.Fatalf("then took %v, want [4 5]", got)
	}
	if n, ended := stream.Take(into); n != 0 || ended {
		t.Fatalf("Take of an empty queue = %d, %v; want 0, false", n, ended)
	}
	if s := r.Stats(); s.EventsDelivered != 4 || s.Queued != 0 {
		t.Fatalf("stats %+v, want 4 delivered, none queued", s)
	}
	stream.Close()
	r.PublishLocked([]fsm.Event{changed("/e", 6)})
	if n, ended := stream.Take(into); n != 0 || !ended {
		t.Fatalf("Take after Close = %d, %v; want 0, true", n, ended)
	}
	if got := pending(r, 1); len(got) != 1 || got[0].Index != 6 {
		t.Fatalf("queued after Close: %v, want index 6 kept for the next stream", got)
	}
}

// TestDeliveryJSONIsEncodingJSONs: AppendJSON writes exactly the bytes
// json.Marshal writes for the delivered api.Event, for every kind of event,
// any watch id (small ones have leading zeros), shards and paths that need
// escapes.
func TestDeliveryJSONIsEncodingJSONs(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	paths := []string{"/", "/a", `/quote"d`, `/back\slash`, "/<html>&", "/tab\tnew\nline", "/é/ü", "/\u2028\u2029", "/bad\xffutf8", "/ctl\x01"}
	ids := []uint64{1, 0xf, 0x10, 0xabc, 1 << 40, 1<<64 - 1}
	for range 2000 {
		id := ids[rng.IntN(len(ids))]
		if rng.IntN(2) == 0 {
			id = rng.Uint64() >> rng.IntN(64)
		}
		f := &fired{
			event: fsm.Event{Kind: fsm.EventKind(rng.IntN(4)), Path: paths[rng.IntN(len(paths))], Version: rng.Uint64() >> rng.IntN(64), Index: rng.Uint64() >> rng.IntN(64)},
			shard: rng.IntN(3) * rng.IntN(300),
		}
		d := Delivery{watchID: id, fired: f}
		want, err := json.Marshal(d.Event())
		if err != nil {
			t.Fatal(err)
		}
		if got := d.AppendJSON([]byte("prefix")); string(got) != "prefix"+string(want) {
			t.Fatalf("AppendJSON of %+v:\n got %s\nwant prefix%s", d.Event(), got, want)
		}
	}
}

// TestFanOutEncodesOnceAndTakesWithoutAllocating: an event that fires the
// watches of many sessions is held once and encoded once for all of them,
// and taking it and encoding it for one more session allocates nothing.
func TestFanOutEncodesOnceAndTakesWithoutAllocating(t *testing.T) {
	const sessions = 20
	r := New(Options{})
	streams := make([]*Stream, sessions)
	for i := range streams {
		streams[i] = r.Stream(uint64(i + 1))
		defer streams[i].Close()
		mustAdd(t, r, uint64(i+1), Spec{Path: "/hot", Persistent: true}, 1, Current{})
		mustAdd(t, r, uint64(i+1), Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	}
	r.PublishLocked([]fsm.Event{changed("/hot", 2)})
	r.PublishLocked([]fsm.Event{changed("/hot", 3)})
	into := make([]Delivery, 4)
	buf := make([]byte, 0, 1024)
	encodings := map[uint64]*byte{} // by index, the first byte of the event's shared encoding
	next := 0
	takeOne := func() {
		n, _ := streams[next].Take(into)
		if n != 4 {
			t.Fatalf("session %d took %d events, want 4 (two events, two watches)", next+1, n)
		}
		for _, d := range into[:n] {
			buf = d.AppendJSON(buf[:0])
			index := d.fired.event.Index
			if first := &d.fired.encodedTail()[0]; encodings[index] == nil {
				encodings[index] = first
			} else if encodings[index] != first {
				t.Fatalf("session %d: index %d was encoded again", next+1, index)
			}
		}
		next++
	}
	takeOne() // encodes both events
	if allocs := testing.AllocsPerRun(sessions-3, takeOne); allocs != 0 {
		t.Fatalf("taking and encoding an event for one more session: %v allocations", allocs)
	}
	for next < sessions {
		takeOne()
	}
}
