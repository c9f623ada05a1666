package watch

import (
	"strings"

	"github.com/latch-io/latch/internal/fsm"
)

// watch is one registered watch. Its fields are guarded by Registry.mu.
type watch struct {
	id      uint64
	session *session
	path    string
	// after is max(at, known_index): the watch fires only for events with
	// a higher index.
	after uint64
	// lastIndex is the index of the last event fired by this watch, so an
	// entry with several events on one path fires it once.
	lastIndex  uint64
	position   int // in its watchList
	recursive  bool
	persistent bool
	// removed is set when the watch is dropped while Publish iterates the
	// lists; Publish skips it and unlinks it at the end.
	removed bool
	// allow is Spec.Allow (nil: every event).
	allow func(path string, index uint64) bool
	owner string // Spec.Owner
}

// watchList is the set of watches on one path (exact or recursive). Order is
// not meaningful: removal swaps the last watch into the gap.
type watchList struct {
	watches []*watch
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

// registerLocked adds w to its session and to the index.
func (r *Registry) registerLocked(w *watch) {
	index := r.exact
	if w.recursive {
		index = r.recursive
	}
	list := index[w.path]
	if list == nil {
		list = &watchList{}
		index[w.path] = list
	}
	w.position = len(list.watches)
	list.watches = append(list.watches, w)
	w.session.watches[w.id] = w
	r.watches++
	if w.owner != "" {
		r.owners[w.owner]++
	}
}

// removeLocked drops w from its session and from the index (at once, or at
// the end of Publish if one is running).
func (r *Registry) removeLocked(w *watch) {
	if w.removed {
		return
	}
	w.removed = true
	delete(w.session.watches, w.id)
	r.watches--
	if w.owner != "" {
		if r.owners[w.owner]--; r.owners[w.owner] == 0 {
			delete(r.owners, w.owner)
		}
	}
	if r.publishing {
		r.unlinkLater = append(r.unlinkLater, w)
		return
	}
	r.unlinkLocked(w)
}

// unlinkLocked takes w out of its watchList.
func (r *Registry) unlinkLocked(w *watch) {
	index := r.exact
	if w.recursive {
		index = r.recursive
	}
	list := index[w.path]
	last := len(list.watches) - 1
	moved := list.watches[last]
	list.watches[w.position] = moved
	moved.position = w.position
	list.watches[last] = nil
	list.watches = list.watches[:last]
	if last == 0 {
		delete(index, w.path)
	}
}

// catchUpLocked decides whether a watch added at index at with spec fires at
// once, and with which event (see Add).
func (r *Registry) catchUpLocked(spec Spec, at uint64, current Current) (fsm.Event, bool) {
	known := spec.KnownIndex
	if known == 0 || known >= at {
		return fsm.Event{}, false
	}
	if latest, ok := r.history.latest(spec.Path, spec.Recursive, known, at); ok {
		latest.Index = at
		return latest, true
	}
	modified := current.Exists && current.ModifiedIndex > known
	if !modified && r.history.covers(known) {
		return fsm.Event{}, false // nothing changed, or the history would hold it
	}
	kind := fsm.EventChanged
	if !current.Exists {
		kind = fsm.EventDeleted
	}
	return fsm.Event{Kind: kind, Path: spec.Path, Version: current.Version, Index: at}, true
}
