package zkserver

// shardPos is a position in the logs a ZooKeeper watch's events come
// from: index in the watch's home shard (its path's), and, on a cluster of
// several shards, others in the other shards its events come from (the
// children's shard of a node whose children live elsewhere; every shard
// for a recursive watch). A shard it does not name is at 0. With one shard
// others is nil.
type shardPos struct {
	index  uint64
	others map[int]uint64
}

// of is the position in shard, for a watch whose home shard is home.
func (p shardPos) of(home, shard int) uint64 {
	if shard == home {
		return p.index
	}
	return p.others[shard]
}

// within reports whether p is at or below through (an index per shard)
// in every shard it names.
func (p shardPos) within(home int, through []uint64) bool {
	if home >= len(through) || p.index > through[home] {
		return false
	}
	for shard, index := range p.others {
		if shard >= len(through) || index > through[shard] {
			return false
		}
	}
	return true
}

// raisedTo is p with every shard it names at through's index.
func (p shardPos) raisedTo(home int, through []uint64) shardPos {
	out := shardPos{index: through[home]}
	if len(p.others) > 0 {
		out.others = make(map[int]uint64, len(p.others))
		for shard := range p.others {
			out.others[shard] = through[shard]
		}
	}
	return out
}

// posOf is the position a read of a node gives: index in the node's shard
// (home), and, if its children were read in another shard, childIndex in
// that one.
func posOf(index uint64, childShard int, childIndex uint64) shardPos {
	if childIndex == 0 {
		return shardPos{index: index}
	}
	return shardPos{index: index, others: map[int]uint64{childShard: childIndex}}
}

// watchPos is the position a latch watch was registered at: index in its
// path's shard, and the others of indexes (the reply's per-shard starts,
// which repeat the path's shard; nil with one shard).
func watchPos(home int, index uint64, indexes map[int]uint64) shardPos {
	p := shardPos{index: index}
	for shard, at := range indexes {
		if shard == home {
			continue
		}
		if p.others == nil {
			p.others = make(map[int]uint64, len(indexes))
		}
		p.others[shard] = at
	}
	return p
}
