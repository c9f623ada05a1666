package watch

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
)

// Defaults of Options.
const (
	DefaultMaxPerSession = 1000
	DefaultQueueLen      = 1024
	DefaultHistoryLen    = 16384
)

// Reasons a stream ends, as Stream.Reason reports them.
const (
	ReasonReplaced     = "replaced"
	ReasonSessionEnded = "session ended"
	ReasonClosed       = "closed"
	ReasonRestored     = "state restored from a snapshot; re-register with known_index"
	// ReasonTokenExpired ends a session's stream when the token that
	// registered some of its watches expired: those watches are gone, the
	// session's others stay for its next stream.
	ReasonTokenExpired = "unauthenticated: token expired; log in again and re-register with known_index"
)

// slowConsumerReason is the reason of a stream closed because its session's
// queue overflowed with undelivered events.
func slowConsumerReason(undelivered int) string {
	return fmt.Sprintf("slow consumer: %d events undelivered; re-register with known_index", undelivered)
}

// ErrNoStream is AddLocked's refusal, with Options.RequireStream, of a watch
// for a session that has no stream attached: its events could reach the
// session only through a stream opened here later, and a client whose stream
// is on another server would never see them.
var ErrNoStream = errors.New("watch: the session has no event stream attached here")

// Options configures a Registry. Zero fields take their defaults.
type Options struct {
	MaxPerSession int // watches a session may hold (default 1,000); over it AddLocked returns *api.Error overloaded
	// MaxPerOwner caps the watches of one Spec.Owner over all its sessions
	// (0: no cap); over it AddLocked returns *api.Error overloaded.
	MaxPerOwner int
	QueueLen    int // undelivered events buffered per session (default 1,024)
	HistoryLen  int // recent events kept for known_index checks (default 16,384)
	// RequireStream makes AddLocked refuse, with ErrNoStream, a watch for a
	// session without an attached stream (see Registry.Stream). A server
	// sets it: watches are local to it, so a registration is accepted only
	// where the session's stream is. Without it a watch's events wait in
	// the session's queue for its next stream.
	RequireStream bool
	// Shards is how many shards publish into the registry (default 1):
	// each has its own index, history and index numbers (Shard).
	Shards int
	// Clock tells the time Spec.Expires is checked against and runs the
	// timers that end expired watches (default clock.Real()).
	Clock clock.Clock
}

func (o Options) withDefaults() Options {
	if o.MaxPerSession <= 0 {
		o.MaxPerSession = DefaultMaxPerSession
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultQueueLen
	}
	if o.HistoryLen <= 0 {
		o.HistoryLen = DefaultHistoryLen
	}
	if o.Shards <= 0 {
		o.Shards = 1
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	return o
}

// minShardHistory is the least history a shard keeps when Options.HistoryLen
// is split over many shards.
const minShardHistory = 1024

// shardHistoryLen is the history each shard keeps: HistoryLen split evenly,
// at least minShardHistory.
func (o Options) shardHistoryLen() int {
	return max(o.HistoryLen/o.Shards, min(o.HistoryLen, minShardHistory))
}

// Spec is what a client asks to watch (docs/api.md POST /v1/watch).
type Spec struct {
	Path       string
	Recursive  bool
	Persistent bool
	KnownIndex uint64
	// Allow, if set, says whether the watch may deliver an event of shard
	// on path at index (its user could read it then); PublishLocked calls
	// it under that shard's state machine's write lock, and skips the
	// event if not. An event skipped does not fire a one-shot watch.
	Allow func(shard int, path string, index uint64) bool
	// Owner is the user the watch counts against (Options.MaxPerOwner);
	// "" counts against no one.
	Owner string
	// Expires, if set, is when the credential that registered the watch
	// (a login token) expires, a reading of Options.Clock: from then on the
	// watch delivers nothing, and it ends (see ReasonTokenExpired).
	// Credential identifies that credential (the token's digest): the
	// watches of one credential share one timer. A registration already
	// past Expires is refused with *api.Error unauthenticated.
	Expires    time.Time
	Credential string
}

// Current is what the caller of AddLocked read from the state machine for
// Spec.Path at the applied index it passes.
type Current struct {
	// Elsewhere says Spec.Path's node lives in another shard than the one
	// the record is added in: only that shard's history can fire the
	// catch-up, and a conservative one says CHANGED.
	Elsewhere     bool
	Exists        bool
	Version       uint64
	CreatedIndex  uint64
	ModifiedIndex uint64
}

// Stats are the registry's figures for metrics.
type Stats struct {
	Watches              int    // registered watches
	Sessions             int    // sessions with watches, a stream or queued events
	Streams              int    // attached streams
	Queued               int    // events queued and not yet delivered, over all sessions
	EventsFired          uint64 // events queued for delivery since New
	EventsDelivered      uint64 // events received by stream consumers since New
	SessionsDisconnected uint64 // slow consumers (and snapshot restores) that lost their watches
	WatchesAdded         uint64 // registrations accepted since New
	WatchesDropped       uint64 // watches dropped with a disconnected session since New
	WatchesExpired       uint64 // watches ended by their token's expiry since New
	RefusedNoStream      uint64 // registrations refused with ErrNoStream since New
}

// Registry is a server's set of watches. It is safe for concurrent use.
type Registry struct {
	opts Options

	// mu guards every field below but the atomic counters, the sessions
	// and their watches; each session's queue, stream and the streams'
	// closed state are guarded by session.mu, taken after mu.
	// PublishLocked holds mu for one batch of events; nothing holds it
	// while waiting on a consumer.
	mu sync.Mutex
	// nextID is the last watch id handed out. It starts at a random point,
	// so ids of different servers (and of one server's restarts) do not
	// collide: a client moving its watches between servers must never take
	// one server's watch id for another's.
	nextID   uint64
	sessions map[uint64]*session // by session id
	shards   []shardState        // by shard number
	watches  int                 // registered watches over all sessions
	owners   map[string]int      // registered watches by Spec.Owner; none at 0
	// credentials are the registered watches with a Spec.Expires, by
	// Spec.Credential; none without a watch.
	credentials map[string]*credential
	stats       Stats // the counters but EventsDelivered; the rest is computed by Stats

	// queuedEvents and deliveredEvents are counted by stream consumers
	// too, which do not take mu.
	queuedEvents    atomic.Int64
	deliveredEvents atomic.Uint64

	// publishing is true while PublishLocked iterates the watch lists: a
	// watch removed then is flagged and left in its list until
	// PublishLocked ends, in unlinkLater, so that iteration sees stable
	// slices.
	publishing  bool
	unlinkLater []*part
	// firstPosition maps each path of the entry being published to the
	// position of its first event in the entry; built lazily, only when a
	// recursive watch matches two events of one entry (see duplicateLocked).
	firstPosition map[string]int
	firstIndexed  bool
}

// New returns an empty registry.
func New(opts Options) *Registry {
	opts = opts.withDefaults()
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	r := &Registry{
		opts:     opts,
		sessions: make(map[uint64]*session),
		shards:   make([]shardState, opts.Shards),
		owners:   make(map[string]int),
		nextID:   binary.LittleEndian.Uint64(seed[:]) >> 2, // room to count up without wrapping to 0
	}
	r.credentials = make(map[string]*credential)
	for k := range r.shards {
		r.shards[k] = newShardState(opts.shardHistoryLen())
	}
	return r
}

// AddLocked registers a watch for session in shard 0 (the only shard of a
// registry of one); see Shard.AddLocked.
func (r *Registry) AddLocked(session uint64, spec Spec, at uint64, current Current) (id uint64, err error) {
	return r.Shard(0).AddLocked(session, spec, at, current)
}

// addLocked is Shard.AddLocked for shard.
func (r *Registry) addLocked(shard int, session uint64, spec Spec, at uint64, current Current) (uint64, error) {
	if err := api.ValidatePath(spec.Path); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkExpiryLocked(spec); err != nil {
		return 0, err
	}
	if r.opts.RequireStream && !r.attachedLocked(session) {
		r.stats.RefusedNoStream++
		return 0, ErrNoStream
	}
	s := r.sessionLocked(session)
	if len(s.watches) >= r.opts.MaxPerSession {
		return 0, api.Errorf(api.CodeOverloaded, "session %s holds %d watches, the limit", api.FormatID(session), len(s.watches))
	}
	if held := r.owners[spec.Owner]; spec.Owner != "" && r.opts.MaxPerOwner > 0 && held >= r.opts.MaxPerOwner {
		r.forgetIfIdleLocked(s)
		return 0, api.Errorf(api.CodeOverloaded, "user %q holds %d watches on this member, its limit: cancel one first", spec.Owner, held)
	}
	r.stats.WatchesAdded++
	r.nextID++
	w := &watch{
		id:         r.nextID,
		session:    s,
		path:       spec.Path,
		recursive:  spec.Recursive,
		persistent: spec.Persistent,
		allow:      spec.Allow,
		owner:      spec.Owner,
		expires:    spec.Expires,
		credential: spec.Credential,
	}
	w.home = part{watch: w, shard: shard, after: max(at, spec.KnownIndex)}
	if !r.catchUpPartLocked(&w.home, spec, at, current) {
		r.forgetIfIdleLocked(s)
		return w.id, nil
	}
	r.registerLocked(w)
	return w.id, nil
}

// catchUpPartLocked fires p's catch-up event, if any, before p is linked.
// It reports whether the watch lives on: false when a one-shot watch fired,
// or when the session was disconnected (its queue overflowed).
func (r *Registry) catchUpPartLocked(p *part, spec Spec, at uint64, current Current) bool {
	event, fire := r.catchUpLocked(p.shard, spec, at, current)
	if !fire {
		return true
	}
	p.lastIndex = at
	queued := r.enqueueLocked(p.watch, &fired{event: event, shard: p.shard})
	return queued && spec.Persistent
}

// extendLocked is Shard.ExtendLocked for shard.
func (r *Registry) extendLocked(shard int, session, id uint64, spec Spec, at uint64, current Current) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[session]
	if s == nil || s.watches[id] == nil {
		return false
	}
	w := s.watches[id]
	p := &part{watch: w, shard: shard, after: max(at, spec.KnownIndex)}
	if !r.catchUpPartLocked(p, spec, at, current) {
		r.removeLocked(w)
		r.forgetIfIdleLocked(s)
		return false
	}
	w.others = append(w.others, p)
	r.linkLocked(p)
	return true
}

// Cancel removes a watch of session. The error is an *api.Error not_found if
// the session holds no such watch (it fired, was cancelled or was dropped).
func (r *Registry) Cancel(session, id uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[session]
	if s == nil || s.watches[id] == nil {
		return api.Errorf(api.CodeNotFound, "watch %s of session %s not found", api.FormatID(id), api.FormatID(session))
	}
	r.removeLocked(s.watches[id])
	r.forgetIfIdleLocked(s)
	return nil
}

// SessionEnded drops all of session's watches and queued events and closes
// its stream with the reason "session ended". Called when the session closes
// or expires.
func (r *Registry) SessionEnded(session uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[session]
	if s == nil {
		return
	}
	r.dropWatchesLocked(s)
	s.mu.Lock()
	r.queuedEvents.Add(-int64(s.queue.clear()))
	if s.stream != nil {
		s.stream.closeSessionLocked(ReasonSessionEnded)
	}
	s.mu.Unlock()
	delete(r.sessions, session)
}

// RestoredLocked tells the registry that the state machine was replaced by a
// snapshot at index (at start-up, or when a lagging server installs one): the
// history before it is unknown, so a later AddLocked with a known_index
// below it fires conservatively. Every session with watches is disconnected (reason
// ReasonRestored), since the changes the snapshot skipped were never
// published. Call it under the state machine's write lock. Without a call,
// the history is taken to start just before the first published event.
func (r *Registry) RestoredLocked(index uint64) {
	r.Shard(0).RestoredLocked(index)
}

// restoredLocked is Shard.RestoredLocked for shard.
func (r *Registry) restoredLocked(shard int, index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shards[shard].history.reset(index)
	for _, s := range r.sessions {
		if len(s.watches) > 0 {
			r.disconnectLocked(s, ReasonRestored)
		}
	}
}

// Stats returns the registry's current figures.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	stats := r.stats
	stats.Watches = r.watches
	stats.Sessions = len(r.sessions)
	stats.Queued = int(r.queuedEvents.Load())
	stats.EventsDelivered = r.deliveredEvents.Load()
	for _, s := range r.sessions {
		s.mu.Lock()
		if s.stream != nil {
			stats.Streams++
		}
		s.mu.Unlock()
	}
	return stats
}

// attachedLocked reports whether session has a stream attached.
func (r *Registry) attachedLocked(session uint64) bool {
	s := r.sessions[session]
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream != nil
}

// sessionLocked returns the record of session id, creating it.
func (r *Registry) sessionLocked(id uint64) *session {
	s := r.sessions[id]
	if s == nil {
		s = &session{id: id, watches: make(map[uint64]*watch)}
		r.sessions[id] = s
	}
	return s
}

// forgetIfIdleLocked deletes s's record once it holds nothing: no watch, no
// stream, no queued event and no disconnect reason to report.
func (r *Registry) forgetIfIdleLocked(s *session) {
	if len(s.watches) > 0 || r.sessions[s.id] != s {
		return
	}
	s.mu.Lock()
	idle := s.stream == nil && s.queue.len() == 0 && s.lostReason == ""
	s.mu.Unlock()
	if idle {
		delete(r.sessions, s.id)
	}
}

// enqueueLocked queues event for the stream of w's session, or, if the
// session's queue is full, disconnects the session and returns false.
func (r *Registry) enqueueLocked(w *watch, event *fired) bool {
	s := w.session
	s.mu.Lock()
	if length := s.queue.len(); length >= r.opts.QueueLen {
		s.mu.Unlock()
		r.disconnectLocked(s, slowConsumerReason(length+1))
		return false
	}
	item := queued{watchID: w.id, fired: event}
	if !w.expires.IsZero() {
		item.expires = &w.expires
	}
	s.queue.push(item)
	if s.stream != nil {
		s.stream.wakeUp()
	}
	s.mu.Unlock()
	r.queuedEvents.Add(1)
	r.stats.EventsFired++
	return true
}

// disconnectLocked drops all of s's watches and queued events and ends its
// stream with reason, or, with no stream attached, keeps reason for the next
// one.
func (r *Registry) disconnectLocked(s *session, reason string) {
	r.stats.SessionsDisconnected++
	r.stats.WatchesDropped += uint64(len(s.watches))
	r.dropWatchesLocked(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	r.queuedEvents.Add(-int64(s.queue.clear()))
	if s.stream != nil {
		s.stream.closeSessionLocked(reason)
	} else {
		s.lostReason = reason
	}
}

func (r *Registry) dropWatchesLocked(s *session) {
	for _, w := range s.watches {
		r.removeLocked(w)
	}
}
