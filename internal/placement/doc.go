// Package placement decides which shard (consensus group) of a sharded
// cluster holds a path. It is the one function every member, every version
// and every later tool must agree on, so its output for a given path and
// shard count never changes: testdata/placement.golden freezes it.
//
// # The rule: a node lives with its siblings
//
// A node at path P lives in the shard of its parent directory:
//
//	Shard(P) = jump(mix(fnv1a64(Parent(P))), N)
//
// so all direct children of one directory are in one shard (as Chubby
// proposes for partitioning its namespace). What must be decided in one log
// is decided among siblings: a children listing, a directory's sequential
// counter, and a lock's or an election's queue (/locks/NAME/lock-N,
// /elections/ROLE/candidate-N are children of /locks/NAME and
// /elections/ROLE). Successive fencing tokens of one lock therefore come
// from one log and strictly increase.
//
// A node and its children are, in general, in different shards: the node's
// own record (value, version, created_index, owner) is in Shard(P), with its
// siblings; its children, and with them its sequential counter and its
// children count, are in ChildShard(P). docs/design.md ("Sharding") says
// what that means for a create that makes missing ancestors, a delete of a
// directory, and children_count.
//
// # Edge cases
//
//   - The root "/" is its own parent (as api.Parent says), so Shard("/") ==
//     ChildShard("/"): the root lives with the top-level nodes (/locks,
//     /elections, /config, ...).
//   - N = 1 maps every path to shard 0, so a one-shard cluster is exactly
//     the unsharded one.
//   - The function reads the exact bytes of the path and does no
//     validation or cleaning: the caller passes a path api.ValidatePath
//     accepted. For any other string it still returns a shard in [0, N),
//     taking the parent as everything before the last '/' ("/" if that is
//     empty or there is no '/').
//
// # Why these hashes
//
// FNV-1a (64 bits) of the parent path's bytes is fully specified, needs no
// key and no table, and is in Go's standard library (the tests check the
// inline copy against hash/fnv). It mixes a path's last bytes by one
// multiplication only, so paths that differ there (/locks/a, /locks/b) get
// related sums; the sum goes through the SplitMix64 finalizer before use.
//
// Jump consistent hash (Lamping and Veach, 2014) then maps the 64-bit key to
// a shard in [0, N) with no table. Its property that matters is growth: going
// from N to N' > N shards moves only a fraction (N'-N)/N' of the directories,
// each to one of the new shards, never between old ones. That is what a later
// split (docs/design.md, "Sharding") builds on: new shards are copied as
// learner groups and cut over, and the old shards only lose directories.
// Plain modulo would move almost every directory on any change of N.
//
// Stability: changing any of this (the hash, the finalizer, the parent rule,
// the jump constants) changes where existing data lives and breaks every
// cluster created before. The golden test must never be rewritten to fit
// new code.
package placement
