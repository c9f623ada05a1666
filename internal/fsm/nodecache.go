package fsm

import "hash/maphash"

// nodeCache remembers the entry last stored for some of the tree's paths,
// each in one of the two slots of the set a hash of its path picks (the
// set's first slot holds the one stored last). A point lookup that finds its
// path there skips the B-tree's search: a dozen comparisons of path
// strings, each a cache miss on a member whose processor caches the other
// processes of the machine keep cold (a member's profile under the
// ZooKeeper port's sets put the one lookup of each set at 7% of its CPU).
// It holds up to maxNodeCacheSlots entries (32 bytes each: 1 MiB), so it
// serves a working set of some tens of thousands of hot nodes (locks,
// leaders, configuration) in a tree of any size; a lookup it misses costs
// a hash and one slot's load more than the search alone.
//
// Invariant: a slot holds either nothing or an entry equal to the one
// f.nodes holds for its path, in its path's set, and no path is in two
// slots. Only writes change it, so the replica's
// readers, which share the live state under a read lock, may consult it:
// storeNode fills a slot (write-through), removeNode empties its path's
// slot, a refused transaction's undo empties the slots filled since its
// copy (trackStores), and dropNodeCache empties all of it where f.nodes is
// cleared as a whole (a snapshot's load).
// Every change to f.nodes goes through these; a Clone starts without a
// cache and never fills one (clones are only read).
type nodeCache struct {
	seed  maphash.Seed
	slots []cachedNode // a power of two of them, in sets of two
	// tracking is set while a transaction holds an undo copy; stored then
	// lists the slots storeNode filled since, which the undo empties
	// (rather than the whole cache).
	tracking bool
	stored   []int
}

// cachedNode is one slot: an entry and its path's hash, which a lookup
// compares first, so that a slot holding another path costs no load of that
// path's bytes.
type cachedNode struct {
	hash uint64
	entry
}

// The cache starts with minNodeCacheSlots slots and grows fourfold each
// time the tree has more than half as many nodes, up to maxNodeCacheSlots:
// a small state machine (a test's) costs 8 KiB, a large one 1 MiB. Two
// slots a node and two ways a set keep about 95% of a working set of up to
// 16,384 nodes written in random order (one slot a node in direct-mapped
// slots kept 75%: a hash picks a slot another path took last about a
// quarter of the time).
const (
	minNodeCacheSlots = 1 << 8
	maxNodeCacheSlots = 1 << 15
)

// index returns p's hash and the number of the first slot of the set it
// picks.
func (c *nodeCache) index(p string) (uint64, int) {
	h := maphash.String(c.seed, p)
	return h, int(h&uint64(len(c.slots)/2-1)) * 2
}

// find returns the slot holding p (whose hash is h) in the set starting at
// slot i, or nil.
func (c *nodeCache) find(p string, h uint64, i int) *cachedNode {
	for j := i; j < i+2; j++ {
		if s := &c.slots[j]; s.hash == h && s.nodeData != nil && s.path == p {
			return s
		}
	}
	return nil
}

// put stores e (its path's hash h) first in the set starting at slot i,
// where another path stored there before moves to the second slot, and
// any slot holding e's path is reused.
func (c *nodeCache) put(e entry, h uint64, i int) {
	first, second := &c.slots[i], &c.slots[i+1]
	switch {
	case first.nodeData != nil && first.hash == h && first.path == e.path:
	case first.nodeData == nil:
		if second.hash == h && second.path == e.path {
			*second = cachedNode{}
		}
	default:
		*second = *first
		c.track(i + 1)
	}
	*first = cachedNode{hash: h, entry: e}
	c.track(i)
}

// track lists slot i as filled since the undo copy, while one is held.
func (c *nodeCache) track(i int) {
	if c.tracking {
		c.stored = append(c.stored, i)
	}
}

func newNodeCache() *nodeCache {
	return &nodeCache{seed: maphash.MakeSeed(), slots: make([]cachedNode, minNodeCacheSlots)}
}

// lookup returns the node at p, if it exists.
func (f *FSM) lookup(p string) (entry, bool) {
	if c := f.cache; c != nil {
		h, i := c.index(p)
		if s := c.find(p, h, i); s != nil {
			return s.entry, true
		}
	}
	return f.nodes.Get(entry{path: p})
}

// storeNode adds e to the tree, or replaces the node at its path. Where the
// cache shows the tree holding e already (its data was modified in place,
// see edit), the tree is left as it is.
func (f *FSM) storeNode(e entry) {
	c := f.cache
	if c == nil {
		c = newNodeCache()
		f.cache = c
	}
	h, i := c.index(e.path)
	if s := c.find(e.path, h, i); s != nil && s.nodeData == e.nodeData {
		return
	}
	f.nodes.Set(e)
	if len(c.slots) < maxNodeCacheSlots && 2*f.nodes.Len() > len(c.slots) {
		// What it held is found in the tree again.
		c.slots = make([]cachedNode, min(4*len(c.slots), maxNodeCacheSlots))
		_, i = c.index(e.path)
	}
	c.put(e, h, i)
}

// removeNode deletes the node at e.path from the tree.
func (f *FSM) removeNode(e entry) {
	f.nodes.Delete(e)
	if c := f.cache; c != nil {
		h, i := c.index(e.path)
		if s := c.find(e.path, h, i); s != nil {
			*s = cachedNode{}
		}
	}
}

// dropNodeCache empties the cache after f.nodes was cleared. The slots are
// cleared, not abandoned, so that no removed node's value stays reachable
// from them.
func (f *FSM) dropNodeCache() {
	if f.cache != nil {
		clear(f.cache.slots)
	}
}

// trackStores starts listing the slots storeNode fills, for a transaction
// that just took an undo copy of f.nodes.
func (f *FSM) trackStores() {
	if f.cache == nil {
		f.cache = newNodeCache()
	}
	f.cache.tracking, f.cache.stored = true, f.cache.stored[:0]
}

// untrackStores ends the listing; with undone set, f.nodes was put back
// to the undo copy, and the slots filled since are emptied (every other
// slot holds an entry the copy holds: the ones removed since were emptied
// by removeNode, and are found in the tree again).
func (f *FSM) untrackStores(undone bool) {
	c := f.cache
	if c == nil || !c.tracking {
		return
	}
	if undone {
		for _, i := range c.stored {
			c.slots[i] = cachedNode{}
		}
	}
	c.tracking, c.stored = false, c.stored[:0]
	if cap(c.stored) > maxTrackedStores {
		c.stored = nil
	}
}

// maxTrackedStores bounds the list kept between transactions.
const maxTrackedStores = 1024
