package watch

import "github.com/latch-io/latch/api"

// Stream is a session's attached event stream: a pump goroutine moves the
// session's queued events, oldest first, to Events. An event leaves the
// queue only once the consumer has received it.
type Stream struct {
	registry *Registry
	session  *session
	events   chan api.Event // unbuffered; closed by the pump when it exits
	done     chan struct{}  // closed when the stream ends
	wake     chan struct{}  // capacity 1: an event was queued
	stopped  chan struct{}  // closed when the pump has stopped
	// previous is the stream attached before this one to the same session
	// record. The pump waits for previous's pump to stop before it starts,
	// so an event the replaced stream's consumer received is popped before
	// the new pump peeks: nothing is lost or sent twice. Owned by the pump.
	previous *Stream

	// reason and closed are guarded by session.mu; reason is set before
	// done is closed and never changes after.
	reason string
	closed bool
	// received counts the events the consumer received from Events;
	// guarded by session.mu.
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
		events:   make(chan api.Event),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
		previous: s.latest,
	}
	s.stream, s.latest = stream, stream
	if s.lostReason != "" {
		stream.closeSessionLocked(s.lostReason)
		s.lostReason = ""
	}
	s.mu.Unlock()
	r.forgetIfIdleLocked(s)
	r.mu.Unlock()
	go stream.pump()
	return stream
}

// Events returns the channel of the stream's events, in index order. It is
// closed after Done, once the pump has stopped; the pump may hand over one
// last event as the stream ends, which a consumer that drains Events until it
// is closed receives, and which otherwise counts as delivered.
func (s *Stream) Events() <-chan api.Event { return s.events }

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
		case s.events <- toAPI(item):
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

func toAPI(item queued) api.Event {
	return api.Event{
		WatchID: api.FormatID(item.watchID),
		Event:   item.event.Kind.String(),
		Path:    item.event.Path,
		Version: item.event.Version,
		Index:   item.event.Index,
		Shard:   item.shard,
	}
}
