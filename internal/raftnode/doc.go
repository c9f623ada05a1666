// Package raftnode runs one consensus group's raft node: it owns the
// go.etcd.io/raft/v3 RawNode of the group, the lock that guards it, and the
// goroutine that handles its Ready batches.
//
// The node runs raft with asynchronous storage writes
// (raft.Config.AsyncStorageWrites): raft does not wait for an Advance, it
// hands the writes to local "threads" as messages and learns that they are
// done from the responses those deliver back. Two goroutines share the work,
// and durability lives in what each does before it answers:
//
//  1. The Ready loop sends every message addressed to peers at once. None of
//     these promises durability: a leader's MsgApp and heartbeats (followers
//     write in parallel with the leader's own fsync, Raft thesis §10.2.1), a
//     follower's forwarded proposals, heartbeat responses. raft keeps back
//     every message that does (votes, MsgAppResp) as a response of the
//     Ready's MsgStorageAppend.
//  2. It queues the MsgStorageAppend (hard state, entries) for the append
//     goroutine and goes on; it queues it just before sending the messages
//     of step 1, so that the peer writers, readied last, run first (a
//     follower's fsync, which a commit needs, starts on their message; the
//     order changes nothing else, as no message of step 1 waits for the
//     append, and raft tolerates any order of messages between members).
//     The append goroutine (append.go) takes every
//     queued message, writes them to the WAL with ONE wal.Save (one fsync),
//     appends them to the in-memory raft log, and only then delivers their
//     responses: MsgAppResp and votes to peers, and to raft itself its own
//     MsgStorageAppendResp (and, leading, its MsgAppResp to itself). So an
//     entry counts toward a commit, on the leader too, only once it is
//     durable where it is counted. A message that only moves the commit
//     index is not written (raft.MustSync): a restarted node learns the
//     commit index again from the leader.
//  3. A MsgStorageAppend carrying a snapshot is stored by the Ready loop
//     itself once the append goroutine has finished every earlier one (it
//     replaces the state machine): WAL marker, snapshot installed in the
//     state machine and the raft log, then its responses.
//  4. The MsgStorageApply's committed entries are applied in order through
//     StateMachine.Apply (conf changes through ApplyConfChange) on the Ready
//     loop, and its response is stepped back into raft. raft gives an entry
//     to apply only once it is committed and durable locally (its
//     MsgStorageAppendResp was stepped), so nothing is applied, and no
//     client answered, before a quorum including this member has it on disk
//     (TestApplyOnlyAfterQuorumFsync checks this at every apply).
//
// # Locking
//
// There is no raft goroutine: the RawNode is guarded by Node.mu, and every
// call into it is a short critical section on the caller's goroutine. A
// proposal, a ReadIndex, a leadership transfer, transport feedback, or a
// peer's message (Step) is stepped by the goroutine that brings it, which
// then wakes the Ready loop with a non-blocking send on a one-slot channel
// (notify); the append goroutine steps the responses of a save, and the
// Ready loop those of an apply, the same way. The Ready loop is the only
// goroutine that calls Ready: on each wake-up or tick it takes HasReady and
// Ready under the lock and handles the Ready with the lock released.
//
// Invariant: the lock is never held across I/O or a wait: no WAL save,
// transport send, apply, snapshot, observer call or channel operation runs
// under it (raft's logger is the exception: raft logs under the lock, at
// Info for instance for each proposal it drops for want of a leader, so the
// log handler's write to stderr runs under it).
// Under it runs only raft's in-memory work: stepping one message (appending
// entries to the unstable log, updating progress, queueing messages),
// building a Ready, a tick, a conf change, or copying the status (the only
// one that grows with the group: one progress per member; quiesce and the
// status endpoint call it, no per-operation path does). Each takes
// microseconds, so a caller stepping a message waits at most for a few
// such sections, never for the Ready loop's handling of a Ready.
//
// raft.Node's behaviour is kept where callers relied on it: a proposal made
// while no leader is known waits until the Ready loop sees one (or ctx
// ends); a leader transferring leadership drops a proposal at once
// (raft.ErrProposalDropped, never appended: the replica proposes it again);
// a node that applied its own removal holds its proposals until it sees a
// leader; a forwarded proposal is taken or dropped at once (a forwarded
// deferred one the leader holds up to its delay, without blocking the
// sender: ProposeDeferred); a response from
// a peer not in the group is dropped silently; once the loop has stopped,
// every call returns ErrStopped, and Done and Err report why.
//
// # Pipeline
//
// While a save runs, the Ready loop replicates and applies. It takes no new
// Ready while appends already wait for the save under way: proposals and
// acknowledgements stepped meanwhile (by their callers, under the lock)
// accumulate in raft and leave together in the next Ready (one save), so a
// batch's fsync overlaps the next batch's replication and the previous
// batch's apply without splitting the work into more, smaller Readys. When
// a save ends with appends waiting, the append goroutine yields once if
// raft holds a Ready, so that the loop, woken by the save's end, queues it
// behind them and both leave in the next save. The
// same holds while the loop applies or sends: what is stepped meanwhile
// leaves in the next Ready. Normal proposals made while the lock is busy,
// or while the first of them lets the goroutines ready to run go first,
// are stepped together, in one MsgProp (proposalBatch): a leader appends
// and broadcasts once per batch, a follower forwards one message. raft
// sends a replicating follower one MsgApp per proposal stepped, and an
// empty one each time the commit index moves; the loop coalesces a
// Ready's consecutive MsgApps to a follower into one, the empty ones
// included (coalesceMessages), so a batch costs each follower one step and
// one acknowledgement; and a follower's Ready forwards the proposals
// stepped into it since the last in one MsgProp, not one each. A follower
// holds back an acknowledgement that repeats the index of its last one (a commit notice's, when it did not
// fold) until its next tick, where a newer one supersedes it (acks.go).
// A deferred proposal (ProposeDeferred: a write whose outcome is not
// needed at once) waits up to its delay for company in the leader's open
// batch: the next proposal made there, or forwarded there, steps both in
// one Ready, the deferred first. A follower forwards its deferred proposal
// at once with its delay (at most maxForwardedDeferral) in the MsgProp's
// Context, and the leader holds it (holdForwarded). Batches are stepped
// oldest first, so a client connection's writes reach raft in order
// (stepThroughLocked), and a write's place is fixed once it joined one
// (ProposePlaced). Batching reports Readys
// taken and messages stepped; Deferrals how the deferred proposals left.
//
// # A stalled disk
//
// A save that has lasted longer than a tick interval stalls the Ready loop
// as a loop that fsyncs itself would be: it neither ticks raft (LastTick
// stands still; the tick is taken once the save returns) nor takes Readys,
// so a leader with a stuck disk stops heartbeating and the others elect a
// leader that can commit.
//
// Every SnapshotEvery applied entries, or sooner once SnapshotBytes of entry
// data were applied, and at the first chance after a conf change (so a
// snapshot sent to a new member names it), the state machine is cloned in
// O(1) on the Ready loop, the clone is written by snap.Store on a background
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
// (no segment space; nothing of the save was written) holds the save and
// makes it again every 250ms until it succeeds or the node stops: none of
// its responses is delivered, so nothing after it is acknowledged or
// applied, and the Ready loop, seeing the WAL full, neither ticks raft nor
// takes Readys, so a leader loses its followers to an election.
// snap.ErrNoSpace (the snapshot's temporary file removed) or no WAL space
// for the snapshot's marker skips that snapshot, keeping every WAL entry,
// and tries again after 2s (on ticks too). Hooks.StorageFull reports each
// part full and writing again. A snapshot result received while the Ready
// loop itself waits for space (storing a snapshot from the leader) is
// finished after that Ready. So is an error from the state machine's Apply
// or ApplyConfChange (a committed entry this binary cannot decode):
// skipping it would let replicas diverge, so the node stops before applying
// anything after it.
//
// # Quiescing
//
// With Config.Quiesce, an idle group stops ticking (quiesce.go), so that a
// process hosting many idle groups does not heartbeat in every one of them.
// Quiescing touches liveness only: raft's safety does not depend on ticks,
// and CheckQuorum, PreVote and ReadOnlySafe are unchanged.
//
//   - A leader quiesces the group when, for quiesceTicks ticks in a row, it
//     found it idle (idleStatus: no leadership transfer, nothing waiting to
//     be made durable, the last index committed, applied here and matched
//     by every member, no snapshot in flight) and nothing woke it in
//     between. In place of that tick it records the quiesce (term, commit)
//     and sends every member a transport.Quiesce.
//   - A follower quiesces on Quiesce only if it follows the sender at that
//     term and its log ends at the message's commit, which is also its
//     commit index; otherwise it ignores it and goes on ticking.
//   - A quiesced group is not ticked; its loop still takes every tick
//     (LastTick moves, the WAL pin check runs), so a stalled disk still
//     shows.
//   - Anything wakes it at once (wake): a local proposal, conf change,
//     ReadIndex or leadership transfer, a snapshot report, and every raft
//     message stepped into it except an idle heartbeat (wakesGroup: a
//     heartbeat answer with no read in it, and, to a quiesced follower, a
//     plain heartbeat of the leader and term that quiesced it). The group
//     ticks again from the next tick; no message waits for a tick.
//   - What raft would learn from ticks the server learns from its own
//     per-member liveness and calls Unquiesce: a quiesced follower whose
//     leader is no longer heard from, or no longer leads, ticks again (with
//     the election timeout's fixed part already elapsed when the leader was
//     lost), so an election happens as before. HoldQuiesce keeps a leader
//     from quiescing for a while (its members did not acknowledge the last
//     quiesce).
//
// A decision to quiesce and a wake may race on different goroutines: the
// quiescer reads the activity counter first, records the quiesce, and
// drops it if the counter moved (setQuiesced), while a wake counts before it
// clears; so a group never stays quiesced past a wake.
//
// The node reads time only through Config.Clock (internal/clock): the
// ticker that ticks raft every TickInterval (or the process's one shared
// Ticks, Config.Ticker, which ticks every group at the same instants so
// that their heartbeats leave together and one timer serves them all),
// LastTick, and the durations given to Hooks. Under a clock.Fake, raft's
// clock moves only when the test advances it.
package raftnode
