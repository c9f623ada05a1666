// Package watch owns latch's server-local watch registry: which session
// watches which node or subtree, the fan-out of the state machine's events
// (internal/fsm) to those watches at apply time, and each session's bounded
// queue of undelivered events with the stream that drains it.
//
// Watches never touch the raft log. A server registers them for the clients
// that talk to it (follower, learner or leader alike), only for a session
// whose stream it has attached (Options.RequireStream: events could reach
// no other stream), and fires them from its own apply path: the replica
// runtime's apply path (replica.Replica.Apply, through the server's apply
// listener) calls PublishLocked with the events of each batch of applied
// entries while it holds the state machine's write lock, and the server
// (server.Server.Watch) calls AddLocked under the read lock, so AddLocked
// sees a history consistent with the state it read.
//
// Names: the exported methods ending in Locked (AddLocked, PublishLocked,
// RestoredLocked) need the caller to hold the state machine's lock (read
// for AddLocked, write for the others) and take the registry's own mutex
// themselves; the unexported ones ending in Locked run with that mutex
// (Registry.mu, or a session's mu where their comment says so) held.
//
// Semantics:
//   - an exact watch on P fires for events whose path is P (CREATED, CHANGED,
//     DELETED, and CHILDREN_CHANGED on P); a recursive watch on P fires for
//     events at P or anywhere under P ("/ab" is not under "/a");
//   - a watch fires only for events with an index above max(at, known_index),
//     at being the applied index when it was added; with a known_index below
//     at, it fires at once (with index at) if what it watches changed in
//     (known_index, at], or if the recent history no longer reaches back that
//     far (conservatively), so a client that reconnects misses nothing;
//   - one-shot watches fire once and are gone (rapid changes coalesce into one
//     event); persistent ones fire for every change;
//   - a watch gets at most one event per (index, path): an entry that reports
//     several changes of one node (a session expiry unlinking many children
//     of one parent) notifies once;
//   - a watch with Spec.Allow delivers only the events Allow passes (the
//     server's per-event authorization); one Spec.Owner holds at most
//     Options.MaxPerOwner watches over all its sessions;
//   - a watch with Spec.Expires (its token's expiry) ends then, by
//     Options.Clock: one timer per Spec.Credential drops the credential's
//     watches and ends their sessions' streams (ReasonTokenExpired); past
//     the expiry the watch fires nothing, and a stream drops its queued
//     events unsent (expiry.go).
//
// Invariants:
//   - per session, queued events are in nondecreasing index order and none
//     is queued twice: PublishLocked runs in index order, and an event fired
//     at once by AddLocked carries index at, which no queued event exceeds;
//   - PublishLocked never blocks on a consumer and never slows apply: a session
//     whose queue would exceed Options.QueueLen is disconnected: its stream
//     closes with a "slow consumer" reason, all its watches are dropped and
//     its queue is emptied; the client re-registers with known_index;
//   - an event leaves a session's queue only when Take moves it, under the
//     session's lock, and a replaced stream was closed under that lock before
//     its successor was attached, so replacing a stream loses and duplicates
//     nothing;
//   - memory per watch is a small constant (about 155 bytes of heap plus its
//     path and, registered with a token, its 32-byte digest, see
//     BenchmarkAdd), per session it is bounded by MaxPerSession watches and
//     QueueLen events (24 bytes each: an event that fires many watches is
//     held, and encoded for the wire, once for all of them), and the
//     history ring holds HistoryLen events (40 bytes each, 640 KiB by
//     default).
//
// Locks: Registry.mu guards the watch index, the sessions and the history;
// each session's mu guards its queue and stream and is taken after
// Registry.mu, or alone by the stream's consumer (Stream.Take), so
// delivery to many streams runs in parallel with PublishLocked and with
// itself.
package watch
