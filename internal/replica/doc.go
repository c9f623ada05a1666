// Package replica is the runtime of one consensus group on one server: its
// raft node, its state machine under its lock, proposals with their waiters,
// batched ReadIndex reads and barriers, and the apply path that tells the
// features (sessions, watches, lock queues) what each committed entry did.
// The server instantiates one Replica per group (one per shard) and hands
// it, through Config, everything it needs from outside: no Replica knows the
// server. A Replica of shard k of N holds fsm.NewShard(k, N) and restores
// only a snapshot of that shard (fsm.ReadShardSnapshot; another shard's or
// count's is refused with fsm.ErrWrongShard and changes nothing).
//
// A write is proposed with Propose: the proposer registers a waiter under
// the command's proposal id; Apply, running on the raft Ready loop after the
// entry is durable and committed, hands the state machine's result to that
// waiter. A waiter is always answered: by its result, by 503 when the leader
// changes while it waits (its outcome is then unknown), or by 503 at the
// request deadline.
//
// A write proposed with a Turn of a Stream in its context (WithTurn,
// stream.go) is handed to raft only after the stream's earlier turns ended
// (their writes placed in the raft node's order of proposals, or given
// up), stamped with the stream's tag: the writes of one client connection
// reach raft in the order sent,
// and the state machine applies them only in that order.
//
// A write proposed with a deferral in its context (Deferred) may wait up
// to that long at the leader to be stepped with the next write proposed
// there or forwarded there (raftnode.Node.ProposeDeferred): for a place
// behind others in a queue, which then shares a WAL save instead of
// taking one.
//
// Linearizable reads share one ReadIndex round per batch (ReadIndex,
// Barrier): the reads that arrive while a round is in flight wait for the
// next one. Each then waits until the local state machine has applied the
// read index, so a follower's or learner's linearizable read is as fresh as
// the leader's.
//
// # Apply order
//
// Apply applies a batch of committed entries and notifies, in this order
// (Config.Listeners are called in the order they are registered, for each
// step):
//
//  1. State visible: each entry is applied to the state machine under the
//     write lock, and every listener's AppliedLocked sees the command and its
//     result right after it, still under the lock (the session tracker
//     learns of created and ended sessions; the watch registry drops the
//     watches of ended sessions). Under the lock, so a reader never sees a
//     session gone from the state while its tracker or watches still hold it.
//  2. Watches published under the write lock (PublishLocked): a watch is
//     registered under the read lock at the state's applied index, so it sees
//     history and state at the same index, never an event twice or a gap.
//  3. Queue wakeups (Applied), after the lock is released: a woken lock waiter
//     reads the state at once, and it must find the deletion that woke it (so
//     after step 1), without waiting on the Ready loop's write lock.
//  4. The applied index is published (and the applied-index metric set):
//     WaitApplied and barriers return only once the entries they wait for
//     are visible, so published after step 1; listeners have run, so a read
//     that passed a barrier at this index finds their effects too.
//  5. Waiters answered, last: a client told its write is done may read it
//     back at once, on any consistency, and must find it applied and its
//     index published.
//
// The member table belongs to conf changes: a member record proposed in a
// normal entry (a member announcing its addresses) is refused unless the
// table holds that member, and keeps the table's Learner flag.
//
// An entry that does not decode stops Apply: the entries before it are
// applied and go through all five steps; none after. The error
// (*UndecodableEntryError) stops the raft node, then the server.
//
// A restore (a snapshot replaced the state) calls RestoredLocked under the
// write lock, then, after the peers of the restored member table got a
// route, publishes the index, fails every pending waiter (their entries were
// never applied here: outcome unknown) and calls Restored (lock waiters look
// again). A leader change calls LeaderChanging before the new leader is
// visible through Leader (a new leader's session deadlines are renewed first),
// then LeaderChanged, then fails the pending waiters if a known leader was
// lost or replaced.
//
// Invariants:
//   - the state machine is mutated only by the Ready loop (Apply,
//     ApplyConfChange, Restore), under the write lock; readers hold the read
//     lock (View);
//   - applied only grows, and is published after the entries it covers are
//     visible to readers.
package replica
