// Package server is one latch server process: its consensus groups, the
// proposal waiters, batched ReadIndex reads, the peer transport and the
// snapshot files behind it, membership addresses, lifecycle and metrics.
//
// A write is proposed by the group that owns its path (one group runs today;
// every WAL record and peer frame already carries the group id). The proposer
// registers a waiter under the command's proposal id; the group's apply
// callback, running on the raft Ready loop after the entry is durable and
// committed, hands the state machine's result to that waiter. A waiter is
// always answered: by its result, by 503 when the leader changes while it
// waits (its outcome is then unknown), or by 503 at the request deadline.
//
// Linearizable reads share one ReadIndex round per batch: the reads that
// arrive while a round is in flight wait for the next one. Each then waits
// until the local state machine has applied the read index, so a follower's
// or learner's linearizable read is as fresh as the leader's.
//
// Invariants:
//   - the state machine is mutated only by the Ready loop (group.Apply,
//     group.Restore), under group.mu; readers hold group.mu for reading;
//   - applied only grows, and is published after the entries it covers are
//     visible to readers.
package server
