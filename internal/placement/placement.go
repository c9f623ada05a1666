package placement

import (
	"fmt"
	"strings"
)

// MaxShards is the largest shard count a cluster may be created with.
const MaxShards = 1024

// Map places paths on Shards shards. The zero Map is not valid; build one
// with New. A Map is a value: safe to copy and to use from any goroutine.
type Map struct {
	shards int
}

// New returns the Map of a cluster with shards shards, from 1 to MaxShards.
func New(shards int) (Map, error) {
	if shards < 1 || shards > MaxShards {
		return Map{}, fmt.Errorf("placement: %d shards: the count must be from 1 to %d", shards, MaxShards)
	}
	return Map{shards: shards}, nil
}

// Shards returns the shard count.
func (m Map) Shards() int { return m.shards }

// Shard returns the shard holding the node at path: the shard of its parent
// directory, so that siblings share a shard.
func (m Map) Shard(path string) int {
	return m.ChildShard(Parent(path))
}

// ChildShard returns the shard holding the direct children of directory
// dir, and with them dir's sequential counter and children count.
func (m Map) ChildShard(dir string) int {
	return jump(mix(fnv1a(dir)), m.shards)
}

// Parent returns the directory whose children include path: everything
// before the last '/', or "/" if that is empty. The parent of "/" is "/".
// It agrees with api.Parent on every valid path.
func Parent(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}
