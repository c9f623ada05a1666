package watch

import (
	"strings"
	"time"

	"github.com/latch-io/latch/internal/fsm"
)

// watch is one registered watch. Its fields are guarded by Registry.mu.
type watch struct {
	id      uint64
	session *session
	path    string
	// home is the watch's record in the first shard it was registered in;
	// others are its records in the other shards it covers (none with one
	// shard, or for a watch whose events all come from one shard).
	home       part
	others     []*part
	recursive  bool
	persistent bool
	// removed is set when the watch is dropped while Publish iterates the
	// lists; Publish skips it and unlinks it at the end.
	removed bool
	// allow is Spec.Allow (nil: every event).
	allow func(shard int, path string, index uint64) bool
	owner string // Spec.Owner
	// expires and credential are Spec.Expires and Spec.Credential, never
	// changed after registration (queued events point to expires).
	expires    time.Time
	credential string
}

// part is a watch's record in one shard's index: the events of that shard
// fire it. Its fields are guarded by Registry.mu.
type part struct {
	watch *watch
	shard int
	// after is max(at, known_index) of this shard: the part fires only for
	// events of the shard with a higher index.
	after uint64
	// lastIndex is the index of the last event of this shard that fired
	// the watch, so an entry with several events on one path fires it once.
	lastIndex uint64
	position  int // in its watchList
}

// parts calls fn with each of w's records.
func (w *watch) parts(fn func(*part)) {
	fn(&w.home)
	for _, p := range w.others {
		fn(p)
	}
}

// watchList is the set of watch records on one path (exact or recursive) in
// one shard. Order is not meaningful: removal swaps the last record into
// the gap.
type watchList struct {
	parts []*part
}

// matches reports whether a watch on path, recursive or not, fires for an
// event at eventPath.
func matches(path string, recursive bool, eventPath string) bool {
	switch {
	case eventPath == path:
		return true
	case !recursive:
		return false
	case path == "/":
		return true
	default:
		return len(eventPath) > len(path) && eventPath[len(path)] == '/' && strings.HasPrefix(eventPath, path)
	}
}

// linkLocked adds p to its shard's index.
func (r *Registry) linkLocked(p *part) {
	index := r.shards[p.shard].indexFor(p.watch.recursive)
	list := index[p.watch.path]
	if list == nil {
		list = &watchList{}
		index[p.watch.path] = list
	}
	p.position = len(list.parts)
	list.parts = append(list.parts, p)
}

// registerLocked adds w, with its home record, to its session and to the
// index.
func (r *Registry) registerLocked(w *watch) {
	r.linkLocked(&w.home)
	w.session.watches[w.id] = w
	r.watches++
	if w.owner != "" {
		r.owners[w.owner]++
	}
	r.trackLocked(w)
}

// removeLocked drops w from its session and from the index (at once, or at
// the end of Publish if one is running).
func (r *Registry) removeLocked(w *watch) {
	if w.removed {
		return
	}
	w.removed = true
	r.untrackLocked(w)
	delete(w.session.watches, w.id)
	r.watches--
	if w.owner != "" {
		if r.owners[w.owner]--; r.owners[w.owner] == 0 {
			delete(r.owners, w.owner)
		}
	}
	w.parts(func(p *part) {
		if r.publishing {
			r.unlinkLater = append(r.unlinkLater, p)
			return
		}
		r.unlinkLocked(p)
	})
}

// unlinkLocked takes p out of its watchList.
func (r *Registry) unlinkLocked(p *part) {
	index := r.shards[p.shard].indexFor(p.watch.recursive)
	list := index[p.watch.path]
	last := len(list.parts) - 1
	moved := list.parts[last]
	list.parts[p.position] = moved
	moved.position = p.position
	list.parts[last] = nil
	list.parts = list.parts[:last]
	if last == 0 {
		delete(index, p.watch.path)
	}
}

// catchUpLocked decides whether a watch's record in shard, added at index
// at with spec, fires at once, and with which event (see AddLocked).
func (r *Registry) catchUpLocked(shard int, spec Spec, at uint64, current Current) (fsm.Event, bool) {
	known := spec.KnownIndex
	if known == 0 || known >= at {
		return fsm.Event{}, false
	}
	h := &r.shards[shard].history
	if latest, ok := h.latest(spec.Path, spec.Recursive, known, at); ok {
		latest.Index = at
		return latest, true
	}
	modified := current.Exists && current.ModifiedIndex > known
	if !modified && h.covers(known) {
		return fsm.Event{}, false // nothing changed, or the history would hold it
	}
	kind := fsm.EventChanged
	if !current.Exists && !current.Elsewhere {
		kind = fsm.EventDeleted
	}
	return fsm.Event{Kind: kind, Path: spec.Path, Version: current.Version, Index: at}, true
}
