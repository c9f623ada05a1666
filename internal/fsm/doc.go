// Package fsm owns latch's replicated state machine: the hierarchical tree of
// nodes, the session table with its owner index of ephemeral nodes, the
// per-session exactly-once (deduplication) windows, the member list and the
// removed members: every member whose removal was applied, kept for good
// because raft must never see a removed id (derived from the name) again.
//
// Every replica applies the same committed commands (internal/command) in log
// order through Apply, and must reach the same state. So Apply is
// deterministic: it reads no clock, draws no random numbers, does no I/O and
// never lets map iteration order reach a result, an event or a snapshot.
// Anything time-like or random (a session's id) is decided by the proposer
// and carried in the command. A command keeps the format version it was
// written with (internal/command), and Apply applies it by that version's
// rules, so a log written by an older binary replays to the same state.
// Hash fingerprints the whole replicated state, so tests can check that
// replicas which applied the same index are identical.
//
// Reseed is the one change made outside the log: it turns a state read from
// a backup into the first state of a new cluster (server.Restore) before any
// replica runs it, ending every session and raising every sequence counter
// to the new log's start so no name is issued twice.
// A transaction (command.OpTxn) applies its operations in order at one
// index, all or nothing: each sees the effects of the ones before it, and
// the first refusal puts back the trees as they were before the first one
// (an O(1) copy-on-write copy taken first), publishes no event and answers
// that operation's index and error, which the exactly-once window
// remembers like any result. A sequential create never takes a number above
// its entry's index, so names stay unique across a parent's re-creation
// even when one entry takes several (see sequenceAhead).
//
// The auth state (auth.go) is replicated like the rest: users with the
// password hashes the server computed, roles granting read, write or admin
// on path prefixes, the enabled flag, and issued tokens, recorded by their
// SHA-256 digest only, with an expiry the proposer decided; expired tokens
// are forgotten when a token is issued, at the proposer's clock carried in
// the command. Only the meta group's auth state is consulted. Its
// invariants: every role a user holds exists; every token's user exists;
// auth is enabled only while the user RootUser exists. Quotas (quota.go)
// are auth state too: set in shard 0 and, with several shards, copied to
// every other shard by sync; a create or set past one is refused with
// quota_exceeded. Each state machine keeps every quota's usage (its
// nodes and value bytes under the prefix) incrementally, exact after
// every entry; with several shards each shard checks its usage against its
// own allotment of the quota, and room moves between shards by give and
// take entries that apply exactly once (quota_ledger.go states the
// escrow argument: a quota's allotments plus the room in transit equal its
// limit, so the usage summed over the shards never passes it). Beside the replicated state, the
// state machine keeps the auth states its latest auth changes replaced
// (authpast.go), so that the watch registry can ask what a user could
// read at each event's index (ReadableAt).
//
// A write may carry the ordering tag of a client connection's stream of
// writes (stream.go): it applies only if it is the next write of its
// stream in the session's position in this shard (the stream opened after
// the position's, or the same stream's next seq), else it is refused
// unavailable and changes nothing, so a connection's writes take effect in
// the order sent even when several are in flight and one is lost. The
// position is part of the session's record (its local record outside
// shard 0) and goes with it.
//
// Requests the state machine refuses (a version mismatch, a missing node, an
// expired session, an invalid path...) are results, not failures: Apply
// returns them in Result.Err as *api.Error with the code of docs/api.md and
// changes nothing but the applied index. A broken invariant of the caller
// (an index that does not increase) panics.
//
// Invariants:
//   - the root "/" always exists; every other node's parent exists;
//   - an ephemeral node (Owner != 0) has no children and its owner session
//     exists; the owner index holds exactly the ephemeral nodes;
//   - a node's children count equals the number of nodes whose parent it is;
//   - no member id is both a member and removed;
//   - a node's ctime and mtime are the TimeMs of the commands that created
//     and last wrote it (never a clock read at apply, so every replica and
//     replay agrees); its cversion counts the creates and deletes of its
//     children by stamped commands, and its pzxid, the index of the latest
//     (or of its create), is never past the applied index. Unstamped
//     commands (older binaries') change none of the four.
//
// # Shards
//
// A state machine is one shard of its cluster: shard k of N (NewShard; New
// is shard 0 of 1), fixed at construction by the server, the same on every
// replica, and recorded in the snapshot (format version 3 when N > 1; a
// snapshot of another shard or N is refused with ErrWrongShard). With N = 1
// nothing below exists and the state machine is exactly what it was: same
// rules, same snapshot bytes (version 2). With N > 1 (docs/design.md,
// "Sharding"), shard k holds the nodes whose parent directory places on k
// (internal/placement), so a shard's nodes are no connected tree, and the
// invariants become, per shard:
//   - every node but the root has its parent here (a node, persistent) or a
//     directory record of its parent here (the parent's node lives in
//     another shard); the root is kept in every shard, but only
//     Shard("/")'s is the real one;
//   - a node's children count is its number of children here, and 0 if its
//     children live in another shard; a directory record's count is its
//     number of children here;
//   - an ephemeral node's owner has a session record here: the session
//     itself in shard 0, elsewhere a local record (its ephemeral count and
//     exactly-once window) made by its first write here;
//   - a closing mark is only on a persistent node whose children live in
//     another shard; the ending list and the session table (shard 0) share
//     no id.
//
// Across shards (checked by the simulation in sim_test.go): every open
// directory record's directory exists in its own shard with the record's
// incarnation, so no child is ever left under a deleted directory (the
// argument is in docs/design.md, "Directories across shards"); and every
// session state outside shard 0 (a local record, an ephemeral node) belongs
// to a session live or ending in shard 0.
//
// # A session's end in every shard: deleted or refused, never leaked
//
// Shard 0 holds the sessions. The entry that ends session s there (close or
// expiry, index e) deletes its ephemerals in shard 0 and puts s on the
// ending list. Shard 0's leader then proposes, in every other shard k, an
// OpSessionsEnded naming s; applied at index i_k, it deletes s's ephemeral
// nodes, queue places and exactly-once window in k and raises k's session
// fence to i_k. When every shard applied it, OpSessionsCleaned drops s from
// the list. A write of s in k (an ephemeral create, an enqueue, an
// exactly-once write) carries Observed = j: an applied index of k the server
// read through a barrier before it read, linearizably, that s is live in
// shard 0. k refuses it (RedoSessionFenced, not remembered) if j < k's fence.
// Let the write commit in k at index x:
//  1. x < i_k: the node exists when OpSessionsEnded applies, which deletes
//     every ephemeral of s in k. Deleted by that end.
//  2. x > i_k and j < i_k: at x the fence is at least i_k > j. Refused.
//  3. x > i_k and j >= i_k: the barrier found k's commit index at or past
//     i_k, so i_k committed before the liveness read began; i_k was proposed
//     only after e committed in shard 0; so that read saw s ended and the
//     write was never proposed. Impossible.
//
// However long a proposal is delayed or retried, the check is made where it
// applies, against a j fixed before the liveness read. Memory is bounded: a
// shard keeps one fence, a local record only for sessions that are live or
// on the ending list (OpSessionsEnded deletes it, and a record that holds
// nothing is dropped at once), and the ending list only sessions whose
// cleanup is in flight; nothing is kept per session after its cleanup. The
// price is spurious refusals: any session's end in k between j and x
// refuses the write once, and the server retries.
//
// An FSM is not safe for concurrent use: its group's runtime
// (replica.Replica) serialises Apply under its write lock and runs reads
// under its read lock (Replica.View). Clone returns an O(1) copy-on-write copy
// (tidwall/btree's Copy) that another goroutine may read or serialise with
// WriteSnapshot while the original keeps applying. Point lookups of nodes
// go through a small cache of recently stored entries (nodecache.go) that
// only writes fill, so reads under the read lock never change it; every
// change to the node tree goes through storeNode or removeNode, and every
// replacement of it through a transaction's undo (which empties the slots
// filled since its copy) or dropNodeCache, which keep it equal to the tree.
package fsm
