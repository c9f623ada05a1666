package watch

import (
	"testing"

	"github.com/latch-io/latch/internal/fsm"
)

// TestStreamBacklog: Backlog counts the events received and those queued,
// so a consumer that counts what it handled knows when it has handled
// every event published before the call; after the stream ends it counts
// only those received.
func TestStreamBacklog(t *testing.T) {
	r := New(Options{})
	mustAdd(t, r, 1, Spec{Path: "/", Recursive: true, Persistent: true}, 1, Current{})
	r.PublishLocked([]fsm.Event{changed("/a", 2), changed("/b", 3)})
	stream := r.Stream(1)
	if got := stream.Backlog(); got != 2 {
		t.Fatalf("Backlog with 2 queued, none received: %d", got)
	}
	receive(t, stream, 2)
	r.PublishLocked([]fsm.Event{changed("/c", 4)})
	if got := stream.Backlog(); got != 3 {
		t.Fatalf("Backlog with 2 received and 1 published since: %d", got)
	}
	receive(t, stream, 1)
	waitQueued(t, r, 1, 0)
	if got := stream.Backlog(); got != 3 {
		t.Fatalf("Backlog with 3 received, none queued: %d", got)
	}
	r.PublishLocked([]fsm.Event{changed("/d", 5)})
	stream.Close()
	if got := stream.Backlog(); got != 3 {
		t.Fatalf("Backlog of an ended stream with 3 received: %d, want 3", got)
	}
}
