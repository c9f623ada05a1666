// Package raftnode runs one consensus group's raft node: it owns the
// go.etcd.io/raft/v3 Node of the group and the goroutine that handles its
// Ready batches.
//
// The Ready loop keeps the library's documented order, which is where
// durability lives:
//
//  1. If this node leads, MsgApp and MsgHeartbeat go to the transport first,
//     so followers write in parallel with the leader's own fsync (Raft thesis
//     §10.2.1). This is safe because raft counts the leader's own copy toward
//     the commit quorum only after Advance, that is after step 2.
//  2. HardState, entries and any snapshot marker are appended to the WAL with
//     ONE fsync (wal.Save). Nothing that promises durability leaves before it:
//     votes, MsgAppResp and every other message are sent only after it.
//     A Ready whose hard state moved only the commit index, with no entries
//     and no snapshot, writes and fsyncs nothing (raft.MustSync): the commit
//     index is relearned from the leader after a restart.
//  3. A received snapshot is installed (raft storage, then the state machine);
//     new entries go to the in-memory raft log.
//  4. Committed entries are applied in order through StateMachine.Apply, conf
//     changes through ApplyConfChange. An entry is applied only after it is
//     durable locally (it was persisted by this or an earlier Ready).
//  5. Advance.
//
// Every SnapshotEvery applied entries, and at the first chance after a conf
// change (so a snapshot sent to a new member names it), the state machine is
// cloned in O(1) on the Ready loop, the clone is written by snap.Store on a background
// goroutine, and only then is the WAL marker written, the raft log compacted
// and old WAL segments released. At most one snapshot is in flight.
//
// An error from the WAL or the snapshot store is fatal: the node stops and
// reports it on Done/Err, and the process must exit (an fsync is never
// retried: the page cache may already have dropped the data).
//
// # A full disk
//
// Except a full filesystem met before anything was written. wal.ErrNoSpace
// (no segment space; nothing of the Ready was written) holds the Ready in
// step 2 and persists it again every 250ms until it succeeds or the node
// stops: nothing after the leader's early appends is sent, nothing is
// applied, raft is not ticked, so the member acknowledges nothing and a
// leader loses its followers to an election. snap.ErrNoSpace (the
// snapshot's temporary file removed) or no WAL space for the snapshot's
// marker skips that snapshot, keeping every WAL entry, and tries again after
// 2s (on ticks too). Hooks.StorageFull reports each part full and writing
// again. A snapshot result received while a Ready waits for space is
// finished after that Ready. So is an
// error from the state machine's Apply or ApplyConfChange (a committed entry
// this binary cannot decode): skipping it would let replicas diverge, so the
// node stops before applying anything after it.
//
// The node reads time only through Config.Clock (internal/clock): the
// ticker that ticks raft every TickInterval (or the process's one shared
// Ticks, Config.Ticker, which ticks every group at the same instants so
// that their heartbeats leave together and one timer serves them all),
// LastTick, the election timeout
// a forwarded proposal may wait, and the durations given to Hooks. Under a
// clock.Fake, raft's clock moves only when the test advances it.
package raftnode
