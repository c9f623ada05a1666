package watch

import (
	"sync"
	"time"
)

// session is the registry's record of one client session: its watches, its
// queue of undelivered events and its attached stream.
type session struct {
	id      uint64
	watches map[uint64]*watch // registered watches by id; guarded by Registry.mu

	// mu guards the fields below and the closed state of the session's
	// streams. It is taken after Registry.mu, or alone by a stream's
	// consumer (Take), so consumers never contend on the
	// registry's lock.
	mu     sync.Mutex
	queue  eventQueue // fired, not yet received by a consumer
	stream *Stream    // the attached stream, or nil
	// lostReason is why the session was disconnected while no stream was
	// attached; the next stream reports it and ends at once.
	lostReason string
}

// queued is one fired event waiting for delivery to one watch's session.
type queued struct {
	watchID uint64
	fired   *fired // shared by the entries of every watch the event fired
	// expires points to the Spec.Expires of the watch that fired it (nil
	// without one): the stream drops the event, unsent, from then on. The
	// watch's field is set at registration and never changed after, so
	// the stream reads it without Registry.mu.
	expires *time.Time
}

// eventQueue is a growable ring of queued events. Its capacity grows by
// doubling as needed (the registry bounds its length); a drained ring larger
// than keptRing is released, so a burst costs nothing once delivered, and a
// small one is kept, so a steady trickle allocates nothing. It is guarded
// by its session's mu.
type eventQueue struct {
	ring  []queued
	start int // ring position of the oldest entry
	count int // entries queued
}

func (q *eventQueue) len() int { return q.count }

func (q *eventQueue) push(item queued) {
	if q.count == len(q.ring) {
		q.grow()
	}
	q.ring[(q.start+q.count)%len(q.ring)] = item
	q.count++
}

func (q *eventQueue) grow() {
	ring := make([]queued, max(keptRing, 2*len(q.ring)))
	for i := range q.count {
		ring[i] = q.ring[(q.start+i)%len(q.ring)]
	}
	q.ring, q.start = ring, 0
}

// pop removes and returns the oldest entry; ok is false if the queue is
// empty.
func (q *eventQueue) pop() (item queued, ok bool) {
	if q.count == 0 {
		return queued{}, false
	}
	item = q.ring[q.start]
	q.ring[q.start] = queued{}
	q.start = (q.start + 1) % len(q.ring)
	q.count--
	if q.count == 0 {
		q.release()
	}
	return item, true
}

// clear drops every entry and returns how many there were.
func (q *eventQueue) clear() int {
	n := q.count
	clear(q.ring)
	q.count = 0
	q.release()
	return n
}

// keptRing is the largest ring an empty queue keeps.
const keptRing = 4

// release resets an empty queue, dropping its ring if it is large.
func (q *eventQueue) release() {
	q.start = 0
	if len(q.ring) > keptRing {
		q.ring = nil
	}
}
