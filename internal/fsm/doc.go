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
// A transaction (command.OpTxn) applies its operations in order at one
// index, all or nothing: each sees the effects of the ones before it, and
// the first refusal puts back the trees as they were before the first one
// (an O(1) copy-on-write copy taken first), publishes no event and answers
// that operation's index and error, which the exactly-once window
// remembers like any result. A sequential create never takes a number above
// its entry's index, so names stay unique across a parent's re-creation
// even when one entry takes several (see sequenceAhead).
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
