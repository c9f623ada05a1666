package client

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// shardPositions are the highest indexes a client has seen per shard of a
// cluster of several shards: the indexes of different shards are of
// different logs, so read-your-writes across members needs each shard's
// own (docs/api.md, "Consistency").
type shardPositions struct {
	mu      sync.Mutex
	sharded bool           // a reply showed a cluster of several shards
	byShard map[int]uint64 // highest index seen per shard
}

func (p *shardPositions) markSharded() {
	p.mu.Lock()
	p.sharded = true
	p.mu.Unlock()
}

// observe raises shard's position to index.
func (p *shardPositions) observe(shard int, index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byShard == nil {
		p.byShard = map[int]uint64{}
	}
	if shard != 0 {
		p.sharded = true
	}
	p.byShard[shard] = max(p.byShard[shard], index)
}

// vector returns the positions as a min_index vector ("0:12,3:40", by
// shard), and false if no reply showed several shards.
func (p *shardPositions) vector() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sharded || len(p.byShard) == 0 {
		return "", p.sharded
	}
	shards := make([]int, 0, len(p.byShard))
	for shard := range p.byShard {
		shards = append(shards, shard)
	}
	slices.Sort(shards)
	pairs := make([]string, len(shards))
	for i, shard := range shards {
		pairs[i] = strconv.Itoa(shard) + ":" + strconv.FormatUint(p.byShard[shard], 10)
	}
	return strings.Join(pairs, ","), true
}

// observeShardIndex raises the client's position in shard to index; shard
// 0's is also LastIndex.
func (c *Client) observeShardIndex(shard int, index uint64) {
	c.positions.observe(shard, index)
	if shard == 0 {
		c.observeIndex(index)
	}
}

// minIndex is the client's min_index parameter: every shard's position on
// a cluster of several shards, else the highest index seen ("" for none).
func (c *Client) minIndex() string {
	if vector, sharded := c.positions.vector(); sharded {
		return vector
	}
	if index := c.LastIndex(); index > 0 {
		return strconv.FormatUint(index, 10)
	}
	return ""
}
