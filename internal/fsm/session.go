package fsm

import (
	"sort"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// DedupWindow is how many recent request sequence numbers each session
// remembers the results of. Requests of one session may be applied out of
// order within the window; a request_seq at or below the newest one minus
// DedupWindow is refused as too old.
const DedupWindow = 128

// session is a live session as stored in the sessions B-tree, by value.
type session struct {
	id         uint64 // random, drawn by the proposer (the create entry's index in old entries)
	timeoutMs  uint64
	ephemerals int // number of ephemeral nodes it owns
	// owner is the user that created the session when auth was enabled
	// (OpSessionCreate's Path); "" otherwise.
	owner string
	// dedup is nil until the session's first exactly-once write. It is
	// shared with clones; see dedupTable.generation.
	dedup *dedupTable
	// stream is the position of the session's stream of ordered writes in
	// this shard (stream.go); zero for none.
	stream streamPos
}

func sessionLess(a, b session) bool { return a.id < b.id }

// Session describes a live session.
type Session struct {
	ID         uint64
	TimeoutMs  uint64
	Ephemerals int
	Owner      string // the creating user, "" if auth was disabled then
}

// dedupTable is a session's window of recent exactly-once results.
type dedupTable struct {
	// generation is the FSM generation allowed to modify this table in
	// place; any other copies it first.
	generation uint64
	// highest is the largest request seq applied.
	highest uint64
	// records is sorted by seq; every seq lies in the window
	// (highest-DedupWindow, highest].
	records []dedupRecord
}

type dedupRecord struct {
	seq    uint64
	result Result
}

// floor returns the smallest seq still inside the window.
func (t *dedupTable) floor() uint64 {
	if t == nil || t.highest < DedupWindow {
		return 1
	}
	return t.highest - DedupWindow + 1
}

// lookup returns the remembered result of seq, whether there was one, or an
// error if seq is below the window.
func (t *dedupTable) lookup(seq uint64) (Result, bool, *api.Error) {
	if seq < t.floor() {
		return Result{}, false, api.Errorf(api.CodeInvalidArgument, "request_seq too old: %d is below the window starting at %d", seq, t.floor())
	}
	if t == nil {
		return Result{}, false, nil
	}
	i, found := t.search(seq)
	if !found {
		return Result{}, false, nil
	}
	result := t.records[i].result
	if e, ok := result.Err.(*api.Error); ok {
		copied := *e // callers may not share the remembered error
		result.Err = &copied
	}
	return result, true, nil
}

func (t *dedupTable) search(seq uint64) (int, bool) {
	i := sort.Search(len(t.records), func(i int) bool { return t.records[i].seq >= seq })
	return i, i < len(t.records) && t.records[i].seq == seq
}

// insert records the result of seq, which lookup found inside the window and
// absent, and drops the records that fall out of the window.
func (t *dedupTable) insert(seq uint64, result Result) {
	i, _ := t.search(seq)
	t.records = append(t.records, dedupRecord{})
	copy(t.records[i+1:], t.records[i:])
	t.records[i] = dedupRecord{seq: seq, result: result}
	if seq > t.highest {
		t.highest = seq
		floor := t.floor()
		drop := sort.Search(len(t.records), func(i int) bool { return t.records[i].seq >= floor })
		if drop > 0 {
			t.records = append(t.records[:0], t.records[drop:]...)
		}
	}
}

// remember records the result of an exactly-once write. The session exists:
// applyWrite checked it and writes never end sessions.
func (f *FSM) remember(id, seq uint64, result Result) {
	s, _ := f.sessions.Get(session{id: id})
	switch {
	case s.dedup == nil:
		s.dedup = &dedupTable{generation: f.generation}
	case s.dedup.generation != f.generation:
		s.dedup = &dedupTable{
			generation: f.generation,
			highest:    s.dedup.highest,
			records:    append(make([]dedupRecord, 0, len(s.dedup.records)+1), s.dedup.records...),
		}
	}
	s.dedup.insert(seq, result)
	f.sessions.Set(s)
}

// createSession applies OpSessionCreate, whose Path, if any, is the user
// that owns the session (set by the server when auth is enabled). The id is the one the proposer
// drew (cmd.SessionID); an entry without one, written by an older binary,
// keeps the old rule: the id is index. An id already live is refused, so
// the proposer draws another.
func (f *FSM) createSession(index uint64, cmd *command.Command) Result {
	id := cmd.SessionID
	if id == 0 {
		id = index
	}
	if _, taken := f.sessions.Get(session{id: id}); taken {
		return Result{Err: api.Errorf(api.CodePreconditionFailed, "session id %s is taken", api.FormatID(id))}
	}
	if _, ending := f.ending.Get(endingSession{id: id}); ending {
		return Result{Err: api.Errorf(api.CodePreconditionFailed, "session id %s is taken by a session still ending", api.FormatID(id))}
	}
	f.sessions.Set(session{id: id, timeoutMs: cmd.TimeoutMs, owner: cmd.Path})
	return Result{SessionID: id, TimeoutMs: cmd.TimeoutMs}
}

// closeSession applies OpSessionClose.
func (f *FSM) closeSession(index, id uint64) (Result, []Event) {
	if _, ok := f.sessions.Get(session{id: id}); !ok {
		return refuse(api.Errorf(api.CodeSessionExpired, "session %s is expired or unknown", api.FormatID(id)))
	}
	f.noteEnded(index, id)
	return Result{}, f.endSession(index, id, nil)
}

// expireSessions applies OpSessionExpire; unknown sessions are skipped.
func (f *FSM) expireSessions(index uint64, ids []uint64) (Result, []Event) {
	var events []Event
	for _, id := range ids {
		if _, ok := f.sessions.Get(session{id: id}); ok {
			f.noteEnded(index, id)
			events = f.endSession(index, id, events)
		}
	}
	return Result{}, events
}

// endSession deletes session id and its ephemeral nodes (in path order),
// appending their events to events.
func (f *FSM) endSession(index, id uint64, events []Event) []Event {
	var paths []string
	f.owners.Ascend(ownerKey{owner: id}, func(k ownerKey) bool {
		if k.owner != id {
			return false
		}
		paths = append(paths, k.path)
		return true
	})
	for _, p := range paths {
		e, _ := f.lookup(p)
		f.removeNode(e)
		f.countNode(p, -1, -int64(len(e.value)))
		f.owners.Delete(ownerKey{owner: id, path: p})
		events = append(events,
			Event{Kind: EventDeleted, Path: p, Version: e.version, Index: index},
			f.unlinkChild(index, p))
	}
	f.sessions.Delete(session{id: id})
	return events
}

// addEphemeral records that session id owns the new ephemeral node path.
func (f *FSM) addEphemeral(id uint64, path string) {
	f.owners.Set(ownerKey{owner: id, path: path})
	s, _ := f.sessions.Get(session{id: id})
	s.ephemerals++
	f.sessions.Set(s)
}

// removeEphemeral forgets the ephemeral node path of session id.
func (f *FSM) removeEphemeral(id uint64, path string) {
	f.owners.Delete(ownerKey{owner: id, path: path})
	s, _ := f.sessions.Get(session{id: id})
	s.ephemerals--
	f.sessions.Set(s)
}
