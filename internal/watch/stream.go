package watch

import (
	"sync"

	"github.com/latch-io/latch/api"
)

// Stream is a session's attached event stream. Its consumer reads the
// session's queued events, oldest first, in one of two ways, never both:
// Events, a channel that a pump goroutine (started by the first call)
// feeds one event at a time; or Take, which moves as many as are queued
// into the consumer's slice, with Ready saying when to call it again. An
// event leaves the queue only once the consumer has received it: from the
// channel, or into its slice.
type Stream struct {
	registry *Registry
	session  *session
	pumpOnce sync.Once
	events   chan api.Event // unbuffered, made by the first Events; closed by the pump when it exits
	done     chan struct{}  // closed when the stream ends
	wake     chan struct{}  // capacity 1: an event was queued
	stopped  chan struct{}  // closed when the pump has stopped; never without a pump
	// previous is the stream attached before this one to the same session
	// record, if a pump was feeding it. This stream's pump, or its first
	// Take, waits for previous's pump to stop before it starts, so an event
	// the replaced stream's consumer received is popped before this one
	// looks at the queue: nothing is lost or sent twice. A replaced stream
	// read with Take needs no wait: Take pops under session.mu, and that
	// stream was closed under it before this one was attached. Owned by
	// the consumer (the pump, or Take's caller).
	previous *Stream

	// reason and closed are guarded by session.mu; reason is set before
	// done is closed and never changes after.
	reason string
	closed bool
	// pumped says the pump was started (the consumer reads Events);
	// guarded by session.mu.
	pumped bool
	// received counts the events the consumer received from Events or
	// Take; guarded by session.mu.
	received uint64
}

// Stream attaches session's event stream, ending any older one with the
// reason "replaced". Events queued while no stream was attached come first,
// in order. If the session was disconnected while no stream was attached,
// the new stream ends at once with that reason.
func (r *Registry) Stream(session uint64) *Stream {
	r.mu.Lock()
	s := r.sessionLocked(session)
	s.mu.Lock()
	if s.stream != nil {
		s.stream.closeSessionLocked(ReasonReplaced)
	}
	stream := &Stream{
		registry: r,
		session:  s,
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
	}
	if s.latest != nil && s.latest.pumped {
		stream.previous = s.latest
	}
	s.stream, s.latest = stream, stream
	if s.lostReason != "" {
		stream.closeSessionLocked(s.lostReason)
		s.lostReason = ""
	}
	s.mu.Unlock()
	r.forgetIfIdleLocked(s)
	r.mu.Unlock()
	return stream
}

// Events returns the channel of the stream's events, in index order; the
// first call starts the pump that feeds it. It is closed after Done, once
// the pump has stopped; the pump may hand over one last event as the
// stream ends, which a consumer that drains Events until it is closed
// receives, and which otherwise counts as delivered. A consumer of Events
// never calls Take.
func (s *Stream) Events() <-chan api.Event {
	s.pumpOnce.Do(func() {
		s.session.mu.Lock()
		s.pumped = true
		s.session.mu.Unlock()
		s.events = make(chan api.Event)
		go s.pump()
	})
	return s.events
}

// Ready returns a channel that receives when an event was queued since the
// consumer of Take last drained the queue (or may have been: a consumer
// that finds nothing to take waits for Ready again). It has room for one
// signal, so a burst of events signals once.
func (s *Stream) Ready() <-chan struct{} { return s.wake }

// Take moves up to len(into) of the session's queued events, oldest first,
// into into and returns how many it moved: they are received (Backlog
// counts them) and left the queue. It drops, unsent, the queued events of
// watches whose credential has expired. It returns ended once the stream
// has ended (Done, Reason), and then moves nothing: what is still queued
// stays for the session's next stream, unless the end dropped it. Take
// never waits on the registry, but its first call waits for the pump of
// the stream this one replaced to stop, which that pump does promptly. A
// consumer of Take never calls Events, and calls Take from one goroutine
// at a time.
func (s *Stream) Take(into []Delivery) (n int, ended bool) {
	if s.previous != nil {
		<-s.previous.stopped // it stops promptly: it was closed before s was attached
		s.previous = nil
	}
	now := s.registry.opts.Clock.Now() // read before session.mu: a fake clock may run timers that take it
	var dropped int
	s.session.mu.Lock()
	if s.closed {
		s.session.mu.Unlock()
		return 0, true
	}
	queue := &s.session.queue
	for n < len(into) {
		item, sequence, ok := queue.peek()
		if !ok {
			break
		}
		queue.popIf(sequence)
		if item.expires != nil && expiredAt(*item.expires, now) {
			dropped++
			continue
		}
		into[n] = Delivery{watchID: item.watchID, fired: item.fired}
		n++
	}
	s.received += uint64(n)
	s.session.mu.Unlock()
	if n+dropped > 0 {
		s.registry.queuedEvents.Add(-int64(n + dropped))
		s.registry.deliveredEvents.Add(uint64(n))
	}
	return n, false
}

// Done returns a channel closed when the stream ends; Reason says why.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Reason says why the stream ended: ReasonReplaced, ReasonSessionEnded,
// ReasonClosed, ReasonRestored, ReasonTokenExpired or "slow consumer: N
// events undelivered; re-register with known_index". It is "" while the
// stream is open.
func (s *Stream) Reason() string {
	s.session.mu.Lock()
	defer s.session.mu.Unlock()
	return s.reason
}

// Close ends the stream (reason "closed") and detaches it from its session,
// which keeps its watches and queued events for the next stream.
func (s *Stream) Close() {
	s.registry.mu.Lock()
	defer s.registry.mu.Unlock()
	s.session.mu.Lock()
	s.closeSessionLocked(ReasonClosed)
	s.session.mu.Unlock()
	s.registry.forgetIfIdleLocked(s.session)
}

// closeSessionLocked ends the stream with reason unless it has ended
// already. s.session.mu must be held.
func (s *Stream) closeSessionLocked(reason string) {
	if s.closed {
		return
	}
	s.closed, s.reason = true, reason
	close(s.done)
	if s.session.stream == s {
		s.session.stream = nil
	}
}

// wakeUp tells the pump that an event was queued. It never blocks.
func (s *Stream) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump delivers the session's queued events until the stream ends.
func (s *Stream) pump() {
	defer close(s.stopped)
	defer close(s.events)
	defer s.forgetSessionIfIdle()
	if s.previous != nil {
		<-s.previous.stopped // it stops promptly: it was closed before s was attached
		s.previous = nil
	}
	for {
		item, sequence, state := s.next()
		switch state {
		case streamEnded:
			return
		case queueEmpty:
			select {
			case <-s.wake:
			case <-s.done:
				return
			}
			continue
		}
		if item.expires != nil && expiredAt(*item.expires, s.registry.opts.Clock.Now()) {
			s.dropExpired(sequence)
			continue
		}
		select {
		case s.events <- toAPI(item.watchID, item.fired):
			s.delivered(sequence)
		case <-s.done:
			return
		}
	}
}

// forgetSessionIfIdle drops the session's record if the stream's end left it
// holding nothing (the pump may have popped its last event after the stream
// was closed).
func (s *Stream) forgetSessionIfIdle() {
	s.registry.mu.Lock()
	defer s.registry.mu.Unlock()
	s.registry.forgetIfIdleLocked(s.session)
}

type pumpState int

const (
	eventReady pumpState = iota
	queueEmpty
	streamEnded
)

// next peeks at the oldest queued event.
func (s *Stream) next() (queued, uint64, pumpState) {
	s.session.mu.Lock()
	defer s.session.mu.Unlock()
	if s.closed {
		return queued{}, 0, streamEnded
	}
	item, sequence, ok := s.session.queue.peek()
	if !ok {
		return queued{}, 0, queueEmpty
	}
	return item, sequence, eventReady
}

// Backlog returns the number of events the consumer will have received
// from Events once it has received every event queued now: those received
// so far and those queued (after the stream ended, those received). The
// registry queues an event while its entry is applied, before a read can
// see that entry, so a consumer that counts the events it has handled can
// tell when it has handled every event of the state a read saw: once its
// count reaches the Backlog taken after the read. The wire layer of a
// protocol that orders notifications before later replies (ZooKeeper's)
// waits for that before it sends a reply.
func (s *Stream) Backlog() uint64 {
	s.session.mu.Lock()
	defer s.session.mu.Unlock()
	if s.closed {
		return s.received
	}
	return s.received + uint64(s.session.queue.len())
}

// delivered pops the event of sequence number sequence, which the consumer
// has received, unless a disconnect cleared the queue meanwhile.
func (s *Stream) delivered(sequence uint64) {
	s.session.mu.Lock()
	s.received++
	popped := s.session.queue.popIf(sequence)
	s.session.mu.Unlock()
	if popped {
		s.registry.queuedEvents.Add(-1)
		s.registry.deliveredEvents.Add(1)
	}
}

// dropExpired pops, unsent, the event of sequence number sequence, fired by
// a watch whose credential has expired since.
func (s *Stream) dropExpired(sequence uint64) {
	s.session.mu.Lock()
	popped := s.session.queue.popIf(sequence)
	s.session.mu.Unlock()
	if popped {
		s.registry.queuedEvents.Add(-1)
	}
}
