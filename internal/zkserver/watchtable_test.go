package zkserver

import (
	"fmt"
	"slices"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/zkproto"
)

// tableRecorder is a watch table without a connection that records the
// notifications it sends and the latch watches it cancels.
type tableRecorder struct {
	*watchTable
	sent      []string
	cancelled []uint64
}

func newTableRecorder() *tableRecorder {
	r := &tableRecorder{}
	r.watchTable = newTableWith(
		func(typ zkproto.EventType, path string) { r.sent = append(r.sent, fmt.Sprintf("%d %s", typ, path)) },
		func(id uint64) { r.cancelled = append(r.cancelled, id) })
	return r
}

// entry adds the entry of a latch watch id on path, added at index at.
func (r *tableRecorder) entry(id uint64, path string, kind watchKind, at uint64) *watchEntry {
	e := &watchEntry{key: watchKey{path, keyKind(kind)}, id: id, at: shardPos{index: at}}
	r.byKey[e.key], r.byID[id] = e, e
	return e
}

// set adds a generation to e as prepare does for a request (held until
// release).
func (r *tableRecorder) set(e *watchEntry, kind watchKind) *watchGen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return addGenLocked(e, kind, false, true)
}

func (r *tableRecorder) event(id uint64, path, event string, index uint64) {
	r.dispatch(api.Event{WatchID: api.FormatID(id), Path: path, Event: event, Index: index})
}

// pos is a position in the one shard of these tests.
func pos(index uint64) shardPos { return shardPos{index: index} }

func deleted(path string) string { return fmt.Sprintf("%d %s", zkproto.EventNodeDeleted, path) }
func changed(path string) string { return fmt.Sprintf("%d %s", zkproto.EventNodeDataChanged, path) }

// TestWatchNotificationWaitsForItsReply: a change after the read that set
// a watch, dispatched before the request's reply is sent, is notified only
// once the reply is (release): a client registers the watch on the reply
// and drops a notification of a watch it does not hold yet, so an earlier
// notification would be lost and the client would wait forever (the lock
// recipes of go-zookeeper and Curator hung on it).
func TestWatchNotificationWaitsForItsReply(t *testing.T) {
	r := newTableRecorder()
	e := r.entry(1, "/lock/n1", kindData, 10)
	g := r.set(e, kindData)
	r.event(1, "/lock/n1", api.EventDeleted, 12) // after the read, before arm
	r.arm(g, pos(11))
	r.event(1, "/lock/n1", api.EventCreated, 13) // one-shot: fired already
	if len(r.sent) != 0 {
		t.Fatalf("notified %v before the reply was sent", r.sent)
	}
	r.release([]*watchGen{g}, []uint64{13}, nil)
	if want := []string{deleted("/lock/n1")}; !slices.Equal(r.sent, want) {
		t.Fatalf("after the reply: notified %v, want %v", r.sent, want)
	}
	if !slices.Equal(r.cancelled, []uint64{1}) {
		t.Fatalf("latch watches cancelled %v, want [1] (the one-shot watch fired)", r.cancelled)
	}
	r.event(1, "/lock/n1", api.EventChanged, 14)
	if len(r.sent) != 1 {
		t.Fatalf("a fired watch notified again: %v", r.sent)
	}
}

// TestWatchSetAgainAfterAChangeItsReadSaw: a connection holds a data watch
// on a node, and sets it again with a read that already sees a change: the
// first watch fires for that change, and the second still waits for the
// next one (as ZooKeeper, which processes the change between the two
// requests). Keeping one watch per path and kind, as before, lost the
// second.
func TestWatchSetAgainAfterAChangeItsReadSaw(t *testing.T) {
	r := newTableRecorder()
	e := r.entry(1, "/cfg", kindData, 10)
	first := r.set(e, kindData)
	r.arm(first, pos(10))
	r.release([]*watchGen{first}, []uint64{10}, nil)
	second := r.set(e, kindData)
	r.arm(second, pos(11)) // its read saw the change at 11
	r.event(1, "/cfg", api.EventChanged, 11)
	if want := []string{changed("/cfg")}; !slices.Equal(r.sent, want) {
		t.Fatalf("the first watch: notified %v, want %v", r.sent, want)
	}
	r.release([]*watchGen{second}, []uint64{11}, nil)
	r.event(1, "/cfg", api.EventChanged, 12)
	if want := []string{changed("/cfg"), changed("/cfg")}; !slices.Equal(r.sent, want) {
		t.Fatalf("the second watch: notified %v, want %v", r.sent, want)
	}
	if len(r.byID) != 0 {
		t.Fatalf("%d entries left after both watches fired", len(r.byID))
	}
}

// TestWatchSetAgainAndAgainKeepsOne: a client that sets the same watch
// again and again on a node that does not change holds one watch once the
// replies are sent, and one change notifies it once.
func TestWatchSetAgainAndAgainKeepsOne(t *testing.T) {
	r := newTableRecorder()
	e := r.entry(1, "/cfg", kindData, 10)
	for i := range uint64(1000) {
		g := r.set(e, kindData)
		r.arm(g, pos(10+i))
		r.release([]*watchGen{g}, []uint64{10 + i}, nil)
	}
	if len(e.gens) != 1 {
		t.Fatalf("%d watches kept after 1000 sets of one, want 1", len(e.gens))
	}
	r.event(1, "/cfg", api.EventChanged, 2000)
	if want := []string{changed("/cfg")}; !slices.Equal(r.sent, want) {
		t.Fatalf("notified %v, want %v", r.sent, want)
	}
}

// TestHeldWatchesOfOneChange: a change that triggers a released watch and
// a held one of the same connection is notified at once for the first,
// and again after the reply for the second (the client registers that one
// only then); two held watches of one request notify it once.
func TestHeldWatchesOfOneChange(t *testing.T) {
	r := newTableRecorder()
	data := r.entry(1, "/a", kindData, 10)
	child := r.entry(2, "/a", kindChild, 10)
	old := r.set(data, kindData)
	r.arm(old, pos(10))
	r.release([]*watchGen{old}, []uint64{10}, nil)
	g1, g2 := r.set(data, kindExist), r.set(child, kindChild)
	r.arm(g1, pos(11))
	r.arm(g2, pos(11))
	r.event(1, "/a", api.EventDeleted, 12)
	r.event(2, "/a", api.EventDeleted, 12)
	if want := []string{deleted("/a")}; !slices.Equal(r.sent, want) {
		t.Fatalf("before the reply: notified %v, want %v", r.sent, want)
	}
	r.release([]*watchGen{g1, g2}, []uint64{12}, nil)
	if want := []string{deleted("/a"), deleted("/a")}; !slices.Equal(r.sent, want) {
		t.Fatalf("after the reply: notified %v, want %v", r.sent, want)
	}
}
