package fsm

import "hash/maphash"

// nodeCache remembers the entry last stored for some of the tree's paths,
// each in the slot a hash of its path picks. A point lookup that finds its
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
// f.nodes holds for its path. Only writes change it, so the replica's
// readers, which share the live state under a read lock, may consult it:
// storeNode fills a slot (write-through), removeNode empties its path's
// slot, and dropNodeCache empties all of it wherever f.nodes is replaced or
// cleared as a whole (a refused transaction's undo, a snapshot's load).
// Every change to f.nodes goes through these; a Clone starts without a
// cache and never fills one (clones are only read).
type nodeCache struct {
	seed  maphash.Seed
	slots []cachedNode // a power of two of them
}

// cachedNode is one slot: an entry and its path's hash, which a lookup
// compares first, so that a slot holding another path costs no load of that
// path's bytes.
type cachedNode struct {
	hash uint64
	entry
}

// The cache starts with minNodeCacheSlots slots and grows fourfold each
// time the tree outgrows it, up to maxNodeCacheSlots: a small state machine
// (a test's) costs 8 KiB, a large one 1 MiB.
const (
	minNodeCacheSlots = 1 << 8
	maxNodeCacheSlots = 1 << 15
)

// slot returns p's hash and the slot it picks.
func (c *nodeCache) slot(p string) (uint64, *cachedNode) {
	h := maphash.String(c.seed, p)
	return h, &c.slots[h&uint64(len(c.slots)-1)]
}

// lookup returns the node at p, if it exists.
func (f *FSM) lookup(p string) (entry, bool) {
	if c := f.cache; c != nil {
		if h, s := c.slot(p); s.hash == h && s.nodeData != nil && s.path == p {
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
	if c != nil {
		if h, s := c.slot(e.path); s.hash == h && s.nodeData == e.nodeData && s.path == e.path {
			return
		}
	}
	f.nodes.Set(e)
	switch {
	case c == nil:
		c = &nodeCache{seed: maphash.MakeSeed(), slots: make([]cachedNode, minNodeCacheSlots)}
		f.cache = c
	case len(c.slots) < maxNodeCacheSlots && f.nodes.Len() > len(c.slots):
		c.slots = make([]cachedNode, 4*len(c.slots)) // what it held is found in the tree again
	}
	h, s := c.slot(e.path)
	*s = cachedNode{hash: h, entry: e}
}

// removeNode deletes the node at e.path from the tree.
func (f *FSM) removeNode(e entry) {
	f.nodes.Delete(e)
	if f.cache != nil {
		if h, s := f.cache.slot(e.path); s.hash == h && s.path == e.path {
			*s = cachedNode{}
		}
	}
}

// dropNodeCache empties the cache after f.nodes was replaced or cleared.
// The slots are cleared, not abandoned, so that no removed node's value
// stays reachable from them.
func (f *FSM) dropNodeCache() {
	if f.cache != nil {
		clear(f.cache.slots)
	}
}
