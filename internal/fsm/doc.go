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
//   - no member id is both a member and removed.
//
// An FSM is not safe for concurrent use: its group's runtime
// (replica.Replica) serialises Apply under its write lock and runs reads
// under its read lock (Replica.View). Clone returns an O(1) copy-on-write copy
// (tidwall/btree's Copy) that another goroutine may read or serialise with
// WriteSnapshot while the original keeps applying.
package fsm
