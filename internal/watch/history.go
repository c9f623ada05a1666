package watch

import "github.com/latch-io/latch/internal/fsm"

// history is a ring of the most recently published events, for the
// known_index check of AddLocked.
type history struct {
	ring  []fsm.Event // allocated once, at its full length, by the first push
	size  int         // the ring's length
	start int         // ring position of the oldest event
	count int         // events held
	// complete is meaningful once known is true. Invariant: every event
	// published with an index above complete is in the ring.
	complete uint64
	known    bool
}

func newHistory(length int) history {
	return history{size: length}
}

// push records event, evicting the oldest one if the ring is full.
func (h *history) push(event fsm.Event) {
	if h.ring == nil {
		h.ring = make([]fsm.Event, h.size)
	}
	if !h.known {
		h.complete, h.known = event.Index-1, true
	}
	if h.count == len(h.ring) {
		h.complete = max(h.complete, h.ring[h.start].Index)
		h.ring[h.start] = event
		h.start = (h.start + 1) % len(h.ring)
		return
	}
	h.ring[(h.start+h.count)%len(h.ring)] = event
	h.count++
}

// reset forgets every event: the history restarts after index.
func (h *history) reset(index uint64) {
	clear(h.ring)
	h.start, h.count = 0, 0
	h.complete, h.known = index, true
}

// covers reports whether every event with an index above after is held.
func (h *history) covers(after uint64) bool {
	return h.known && h.complete <= after
}

// latest returns the newest held event with an index in (after, upTo] that
// the watch of path (recursive or not) matches.
func (h *history) latest(path string, recursive bool, after, upTo uint64) (fsm.Event, bool) {
	for i := h.count - 1; i >= 0; i-- {
		event := h.ring[(h.start+i)%len(h.ring)]
		if event.Index <= after {
			break
		}
		if event.Index <= upTo && matches(path, recursive, event.Path) {
			return event, true
		}
	}
	return fsm.Event{}, false
}
