package watch

// Stream is a session's attached event stream. Its consumer moves the
// session's queued events, oldest first, into its own slice with Take, and
// Ready says when to call Take again. An event leaves the queue only once
// it is in the consumer's slice.
type Stream struct {
	registry *Registry
	session  *session
	done     chan struct{} // closed when the stream ends
	wake     chan struct{} // capacity 1: an event was queued

	// reason and closed are guarded by session.mu; reason is set before
	// done is closed and never changes after.
	reason string
	closed bool
	// received counts the events the consumer took; guarded by
	// session.mu.
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
	}
	s.stream = stream
	if s.lostReason != "" {
		stream.closeSessionLocked(s.lostReason)
		s.lostReason = ""
	}
	s.mu.Unlock()
	r.forgetIfIdleLocked(s)
	r.mu.Unlock()
	return stream
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
// never waits on the registry; the consumer calls it from one goroutine at
// a time. A stream that replaced another takes up where that one's
// consumer stopped: the older stream was closed under session.mu before
// this one was attached, so what it took is popped and nothing is handed
// over twice.
func (s *Stream) Take(into []Delivery) (n int, ended bool) {
	now := s.registry.opts.Clock.Now() // read before session.mu: a fake clock may run timers that take it
	var dropped int
	s.session.mu.Lock()
	if s.closed {
		s.session.mu.Unlock()
		return 0, true
	}
	queue := &s.session.queue
	for n < len(into) {
		item, ok := queue.pop()
		if !ok {
			break
		}
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
// which keeps its watches and queued events for the next stream. The
// consumer calls it even after the stream has ended otherwise: it is what
// frees the session's record once nothing is left in it.
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

// wakeUp tells the consumer that an event was queued. It never blocks.
func (s *Stream) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Backlog returns the number of events the consumer will have taken once
// it has taken every event queued now: those taken so far and those
// queued (after the stream ended, those taken). The
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
