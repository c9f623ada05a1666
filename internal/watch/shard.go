package watch

import "github.com/latch-io/latch/internal/fsm"

// shardState is what the registry keeps per shard: the watch records its
// events fire and its recent history. Guarded by Registry.mu.
type shardState struct {
	exact     map[string]*watchList // exact records by path
	recursive map[string]*watchList // recursive records by their root path
	history   history
}

func newShardState(historyLen int) shardState {
	return shardState{
		exact:     make(map[string]*watchList),
		recursive: make(map[string]*watchList),
		history:   newHistory(historyLen),
	}
}

func (st *shardState) indexFor(recursive bool) map[string]*watchList {
	if recursive {
		return st.recursive
	}
	return st.exact
}

// Shard is the registry as one shard's apply path and registrations see it:
// the shard's events fire the records of watches in that shard, at that
// shard's indexes. Indexes of different shards are of different logs and
// never compared. A watch may hold a record in several shards (a recursive
// watch whose subtree spans shards); its events then come from each, in
// index order per shard and in no order across shards. Every session has one
// queue and one stream for the events of every shard.
//
// A server runs one consensus group per shard, each with its own state
// machine lock: a Shard's Locked methods need that shard's state machine
// lock (read for AddLocked and ExtendLocked, write for PublishLocked and
// RestoredLocked), and take the registry's mutex after it.
type Shard struct {
	r     *Registry
	shard int
}

// Shard returns the registry's handle for shard k, 0 <= k < Options.Shards.
func (r *Registry) Shard(k int) Shard { return Shard{r: r, shard: k} }

// AddLocked registers a watch for session with its first record in this
// shard, at the shard's applied index at; the caller holds the shard's state
// machine read lock, so no event of the shard above at has been published,
// and current is what it read for spec.Path (Current.Elsewhere if the node
// lives in another shard). The record fires for events of this shard with an
// index above max(at, spec.KnownIndex). If spec.KnownIndex is set, below at,
// and what the watch covers changed in (KnownIndex, at] (current shows it,
// the shard's history holds a matching event, or that history no longer
// reaches back to KnownIndex+1), it fires at once with an event of index at:
// the kind, path and version of the latest matching change when the history
// has it, else CHANGED (DELETED if the node does not exist here) on
// spec.Path with current.Version. A one-shot watch that fires at once is not
// kept; its id is returned all the same. The error is an *api.Error
// (invalid_argument for a bad path, overloaded over Options.MaxPerSession),
// or ErrNoStream with Options.RequireStream when no stream of session is
// attached: the check and the registration happen under the lock that Stream
// and Stream.Close take, so an accepted watch's events, its catch-up event
// included, go to a stream that was attached when it was registered.
func (sh Shard) AddLocked(session uint64, spec Spec, at uint64, current Current) (uint64, error) {
	return sh.r.addLocked(sh.shard, session, spec, at, current)
}

// ExtendLocked adds a record in this shard to session's watch id, made by
// AddLocked in another shard, as AddLocked would with spec (whose
// KnownIndex is this shard's), at and current. It reports whether the watch
// lives on: false if it is gone (a one-shot watch that fired, a cancelled
// or dropped one) or if this record's catch-up fired a one-shot watch, which
// then is gone. The caller holds this shard's state machine read lock.
func (sh Shard) ExtendLocked(session, id uint64, spec Spec, at uint64, current Current) bool {
	return sh.r.extendLocked(sh.shard, session, id, spec, at, current)
}

// PublishLocked fans out the events of this shard's applied entries, in
// index order; see Registry.PublishLocked.
func (sh Shard) PublishLocked(events []fsm.Event) { sh.r.publishLocked(sh.shard, events) }

// RestoredLocked tells the registry that this shard's state machine was
// replaced by a snapshot at index; see Registry.RestoredLocked. Every
// session with watches is disconnected, whatever shards they cover.
func (sh Shard) RestoredLocked(index uint64) { sh.r.restoredLocked(sh.shard, index) }
