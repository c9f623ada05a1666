package watch

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// PublishLocked fans out the events of applied entries, in index order, to the
// matching watches. The apply loop calls it while holding the state
// machine's write lock. It never blocks on a consumer: a session whose queue
// is full is disconnected instead. Per event it costs one map lookup for
// exact watches and one per ancestor of the path (the path itself up to "/")
// for recursive watches, skipped when there are none, and it allocates
// nothing when no watch matches.
func (r *Registry) PublishLocked(events []fsm.Event) { r.publishLocked(0, events) }

// publishLocked is PublishLocked for the events of shard.
func (r *Registry) publishLocked(shard int, events []fsm.Event) {
	if len(events) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishing = true
	st := &r.shards[shard]
	entryStart := 0
	for position := range events {
		if events[position].Index != events[entryStart].Index {
			entryStart, r.firstIndexed = position, false
		}
		st.history.push(events[position])
		if r.watches > 0 {
			r.fanOutLocked(st, shard, events[entryStart:], position-entryStart)
		}
	}
	r.publishing, r.firstIndexed = false, false
	r.unlinkRemovedLocked()
}

// fanOutLocked fires the watches matching entry[position]; entry starts with
// the first event of its entry. The watches it fires share one fired
// record of the event, made when the first of them fires.
func (r *Registry) fanOutLocked(st *shardState, shard int, entry []fsm.Event, position int) {
	event := &entry[position]
	var shared *fired
	if list := st.exact[event.Path]; list != nil {
		shared = r.fireListLocked(list, shard, entry, position, shared)
	}
	if len(st.recursive) == 0 {
		return
	}
	for path := event.Path; ; path = api.Parent(path) {
		if list := st.recursive[path]; list != nil {
			shared = r.fireListLocked(list, shard, entry, position, shared)
		}
		if path == "/" {
			return
		}
	}
}

// fireListLocked fires the watches of list that entry[position] fires,
// with shared, or, if shared is nil, a fired record it makes for the first
// of them; it returns the record, nil if it fired none.
func (r *Registry) fireListLocked(list *watchList, shard int, entry []fsm.Event, position int, shared *fired) *fired {
	event := &entry[position]
	for _, p := range list.parts {
		w := p.watch
		if w.removed || event.Index <= p.after || (w.allow != nil && !w.allow(shard, event.Path, event.Index)) {
			continue
		}
		if r.expiredLocked(w) {
			continue // its credential's timer is due and ends it
		}
		if p.lastIndex == event.Index && (!w.recursive || r.duplicateLocked(entry, position)) {
			continue // this entry already fired w for this path
		}
		p.lastIndex = event.Index
		if !w.persistent {
			r.removeLocked(w)
		}
		if shared == nil {
			shared = &fired{event: *event, shard: shard}
		}
		r.enqueueLocked(w, shared)
	}
	return shared
}

// duplicateLocked reports whether an earlier event of entry has the path of
// entry[position]. Called only when a recursive watch matches a second event
// of one entry.
func (r *Registry) duplicateLocked(entry []fsm.Event, position int) bool {
	if !r.firstIndexed {
		if r.firstPosition == nil || len(r.firstPosition) > 4096 {
			r.firstPosition = make(map[string]int)
		}
		clear(r.firstPosition)
		for i := range entry {
			if entry[i].Index != entry[0].Index {
				break
			}
			if _, seen := r.firstPosition[entry[i].Path]; !seen {
				r.firstPosition[entry[i].Path] = i
			}
		}
		r.firstIndexed = true
	}
	return r.firstPosition[entry[position].Path] < position
}

// unlinkRemovedLocked unlinks the watches removed during PublishLocked.
func (r *Registry) unlinkRemovedLocked() {
	for i, p := range r.unlinkLater {
		r.unlinkLocked(p)
		r.unlinkLater[i] = nil
	}
	r.unlinkLater = r.unlinkLater[:0]
}
