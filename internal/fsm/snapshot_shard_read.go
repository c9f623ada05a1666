package fsm

import (
	"github.com/latch-io/latch/api"
)

// readEnding reads the ending frames of a version-3 snapshot: sorted by id,
// none a live session, each ended at or below the applied index.
func (sr *snapshotReader) readEnding(f *FSM, count uint64) error {
	var previous uint64
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameEnding)
		if err != nil {
			return err
		}
		e := endingSession{id: d.uvarint(), ended: d.uvarint()}
		_, live := f.sessions.Get(session{id: e.id})
		switch {
		case d.err != nil:
		case e.id <= previous:
			d.fail(d.base, "ending session %d out of order", e.id)
		case live:
			d.fail(d.base, "ending session %d is live", e.id)
		case e.ended == 0 || e.ended > f.applied:
			d.fail(d.base, "ending session %d ended at index %d, applied %d", e.id, e.ended, f.applied)
		}
		if err := d.finish(); err != nil {
			return err
		}
		f.ending.Load(e)
		previous = e.id
	}
	return nil
}

// readDirectories reads the directory frames of a version-3 snapshot: in
// tree order, each of a directory whose children live in this shard and its
// node in another, with an incarnation.
func (sr *snapshotReader) readDirectories(f *FSM, count uint64) error {
	previous := ""
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameDirectory)
		if err != nil {
			return err
		}
		r := dirRecord{path: d.string(), incarnation: d.uvarint(), sequence: d.uvarint()}
		children := d.uvarint()
		switch {
		case d.err != nil:
		case api.ValidatePath(r.path) != nil:
			d.fail(d.base, "directory path %q is invalid", r.path)
		case previous != "" && !pathLess(previous, r.path):
			d.fail(d.base, "directory %q does not sort after %q", r.path, previous)
		case !f.foreignDirectory(r.path):
			d.fail(d.base, "%s holds no directory record of %q", f.shard, r.path)
		case r.incarnation == 0:
			d.fail(d.base, "directory %q has no incarnation", r.path)
		case children > maxChildren:
			d.fail(d.base, "children count %d is impossible", children)
		}
		if err := d.finish(); err != nil {
			return err
		}
		r.children = int(children)
		f.dirs.Load(r)
		previous = r.path
	}
	return nil
}

// readShardNodes reads the node frames of a version-3 snapshot. A shard's
// nodes are no connected tree: each node's parent is a node here (pre-order:
// read before it) or has a directory record here, and every children count
// (of a node whose children live here, or of a record) is the number of
// nodes read under it; a node whose children live elsewhere counts none.
func (sr *snapshotReader) readShardNodes(f *FSM, count uint64) error {
	if count == 0 {
		return corruptf(sr.offset, "no root node")
	}
	f.nodes.Clear()
	f.dropNodeCache()
	counted := make(map[string]int)
	ephemerals := make(map[uint64]int)
	previous := ""
	for i := uint64(0); i < count; i++ {
		start := sr.offset
		d, err := sr.frame(frameNode)
		if err != nil {
			return err
		}
		e := d.node(previous)
		if d.err == nil {
			e.closing = d.uvarint()
		}
		sr.nodeTimes(d, e, f.applied)
		if err := d.finish(); err != nil {
			return err
		}
		if err := f.checkShardNode(previous, e, start); err != nil {
			return err
		}
		if e.path != "/" {
			counted[api.Parent(e.path)]++
		}
		if e.owner != 0 {
			ephemerals[e.owner]++
			f.owners.Set(ownerKey{owner: e.owner, path: e.path})
		}
		f.nodes.Load(e)
		previous = e.path
	}
	if err := f.checkShardCounts(counted, sr.offset); err != nil {
		return err
	}
	for id, n := range ephemerals { // order is irrelevant: each sets one session
		s, _ := f.sessions.Get(session{id: id})
		s.ephemerals = n
		f.sessions.Set(s)
	}
	return nil
}

// checkShardNode checks node e, read after previous, of a sharded state.
func (f *FSM) checkShardNode(previous string, e entry, offset int64) error {
	if previous == "" {
		if e.path != "/" || e.owner != 0 || e.closing != 0 {
			return corruptf(offset, "first node %q is not the persistent root", e.path)
		}
		return f.checkShardChildren(e, offset)
	}
	if err := api.ValidatePath(e.path); err != nil {
		return corruptf(offset, "node path: %v", err)
	}
	if !pathLess(previous, e.path) {
		return corruptf(offset, "node %q does not sort after %q", e.path, previous)
	}
	dir := api.Parent(e.path)
	if !f.holdsChildrenOf(dir) {
		return corruptf(offset, "node %q belongs to shard %d, not %s", e.path, f.placementMap().Shard(e.path), f.shard)
	}
	if f.holdsNode(dir) {
		parent, ok := f.lookup(dir)
		switch {
		case !ok:
			return corruptf(offset, "node %q has no parent", e.path)
		case parent.owner != 0:
			return corruptf(offset, "node %q is the child of ephemeral %q", e.path, dir)
		}
	} else if _, ok := f.dirs.Get(dirRecord{path: dir}); !ok {
		return corruptf(offset, "node %q has no directory record of its parent", e.path)
	}
	if e.owner != 0 {
		if _, ok := f.sessions.Get(session{id: e.owner}); !ok {
			return corruptf(offset, "node %q is owned by unknown session %d", e.path, e.owner)
		}
		if e.closing != 0 {
			return corruptf(offset, "ephemeral node %q is closing", e.path)
		}
	}
	if e.closing != 0 && (!f.foreignChildren(e.path) || e.closing > f.applied) {
		return corruptf(offset, "node %q has closing mark %d", e.path, e.closing)
	}
	return f.checkShardChildren(e, offset)
}

// checkShardChildren checks that a node whose children live elsewhere
// counts none and that an ephemeral node has none.
func (f *FSM) checkShardChildren(e entry, offset int64) error {
	if e.children != 0 && (e.owner != 0 || !f.holdsChildrenOf(e.path)) {
		return corruptf(offset, "node %q declares %d children it cannot have here", e.path, e.children)
	}
	return nil
}

// checkShardCounts checks every children count against counted, the
// children read under each directory.
func (f *FSM) checkShardCounts(counted map[string]int, offset int64) error {
	var err error
	f.nodes.Scan(func(e entry) bool {
		if e.children != counted[e.path] && f.holdsChildrenOf(e.path) {
			err = corruptf(offset, "node %q declares %d children but has %d", e.path, e.children, counted[e.path])
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	f.dirs.Scan(func(r dirRecord) bool {
		if r.children != counted[r.path] {
			err = corruptf(offset, "directory %q declares %d children but has %d", r.path, r.children, counted[r.path])
		}
		return err == nil
	})
	return err
}
