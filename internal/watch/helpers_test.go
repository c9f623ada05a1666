package watch

import (
	"errors"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// waitTimeout bounds every wait on a stream; generous for a loaded 2-core
// machine under -race.
const waitTimeout = 20 * time.Second

func event(kind fsm.EventKind, path string, version, index uint64) fsm.Event {
	return fsm.Event{Kind: kind, Path: path, Version: version, Index: index}
}

func changed(path string, index uint64) fsm.Event {
	return event(fsm.EventChanged, path, index, index)
}

// pending returns session's queued events, oldest first, without delivering
// them.
func pending(r *Registry, session uint64) []api.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[session]
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var events []api.Event
	for i := range s.queue.count {
		item := s.queue.ring[(s.queue.start+i)%len(s.queue.ring)]
		events = append(events, toAPI(item.watchID, item.fired))
	}
	return events
}

func mustAdd(t testing.TB, r *Registry, session uint64, spec Spec, at uint64, current Current) uint64 {
	t.Helper()
	id, err := r.AddLocked(session, spec, at, current)
	if err != nil {
		t.Fatalf("Add(%d, %+v, %d): %v", session, spec, at, err)
	}
	return id
}

// receive takes n events from stream, no more, waiting on Ready between
// takes, and fails the test if the stream ends first or after waitTimeout.
func receive(t *testing.T, stream *Stream, n int) []api.Event {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	into := make([]Delivery, n)
	var events []api.Event
	for len(events) < n {
		got, ended := stream.Take(into[:n-len(events)])
		for _, d := range into[:got] {
			events = append(events, d.Event())
		}
		if ended {
			t.Fatalf("stream ended (%q) after %d of %d events", stream.Reason(), len(events), n)
		}
		if got > 0 {
			continue
		}
		select {
		case <-stream.Ready():
		case <-stream.Done():
		case <-deadline.C:
			t.Fatalf("took %d of %d events within %v", len(events), n, waitTimeout)
		}
	}
	return events
}

// takeNothing fails the test if an ended stream hands anything over.
func takeNothing(t *testing.T, stream *Stream) {
	t.Helper()
	into := make([]Delivery, 1)
	if n, ended := stream.Take(into); n != 0 || !ended {
		t.Fatalf("Take on the ended stream = %d, %v: want nothing, ended", n, ended)
	}
}

// waitDone waits for stream to end and returns its reason.
func waitDone(t *testing.T, stream *Stream) string {
	t.Helper()
	select {
	case <-stream.Done():
		return stream.Reason()
	case <-time.After(waitTimeout):
		t.Fatalf("stream did not end within %v", waitTimeout)
		return ""
	}
}

// waitQueued waits until session has n events queued.
func waitQueued(t *testing.T, r *Registry, session uint64, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for len(pending(r, session)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("session %d has %d events queued, want %d", session, len(pending(r, session)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func isCode(err error, code api.Code) bool {
	return errors.Is(err, &api.Error{Code: code})
}

func indexes(events []api.Event) []uint64 {
	out := make([]uint64, len(events))
	for i, e := range events {
		out[i] = e.Index
	}
	return out
}
