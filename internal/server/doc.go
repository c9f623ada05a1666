// Package server is one latch server process: it opens the data directory
// (WAL, snapshot files), runs the peer transport, starts one replica runtime
// (package replica) per consensus group with its features (package sessions
// for session liveness and the heartbeat relay, package queues for locks and
// elections, the watch registry), and keeps membership, configuration,
// status, metrics and lifecycle. It is the API package httpapi serves, in
// request and reply types of its own (PutRequest and DeleteRequest with a
// Precondition, ReadOptions, WatchRequest, the EventStream of Events, the
// api replies), so httpapi imports neither command nor watch. A lock
// acquire that gives up after its wait is a reply (api.Lock with Held
// false), not an error.
//
// The server runs Config.Shards consensus groups (shards.go): shard k is
// consensus group k+1, and shard 0 (group 1) is the meta group that holds
// the member table and the sessions, so a data directory written by a
// single-group server is shard 0 of --shards 1. The shard count is recorded
// in the data directory and checked at every start (another count is
// refused, ErrShardCount) and in the peer handshake. All groups share the
// one WAL (group commit across groups), the snapshot store (files per
// group), one peer connection per member pair, and one raft ticker.
//
// Every request finds its group through groupFor(path) (the shard of the
// path's parent: tree reads and writes), childGroup(dir) (the shard of a
// directory's children: a lock's or an election's queue) or metaGroup()
// (membership, sessions, watches, status). Each shard's replica holds the
// state machine of that shard (fsm.NewShard, restored by ReadShardSnapshot).
//
// With more than one shard the server drives the cross-shard protocols of
// docs/design.md ("Commands and server steps"); with one shard none of this
// runs and every write is one entry, as before:
//   - every proposal of a group goes through group.Propose (shardwrite.go):
//     a session's write outside shard 0 carries an Observed index read
//     through a barrier of its shard before the session is read live in
//     shard 0; a create under a directory whose node lives in another shard
//     takes the open path (the parent read linearizably in its own shard;
//     its created_index is the Incarnation); missing ancestors are made
//     top-down, one write in each one's shard; refusals with a Redo are
//     retried at most maxShardAttempts times, then 503. Invariant: no
//     session's node or exactly-once window is made in a shard after that
//     shard applied the session's cleanup (the fence argument of the
//     design), and no child is made under a directory being deleted.
//   - session ends (sessionend.go): shard 0's leader proposes
//     OpSessionsEnded in every other shard for the ending list, then
//     OpSessionsCleaned; a close answers once its session left the list.
//     The list is replicated, so a new leader resumes; memory stays bounded
//     by the sessions whose cleanup is in flight.
//   - deletes (sharddelete.go): the close protocol for a persistent node
//     whose children live elsewhere, recursive deletes bottom-up (not
//     atomic), and (shardmarks.go) the marks a stopped delete left behind,
//     finished by the shard's leader.
//   - Get's children_count and the children listing read the directory's
//     children shard (kv.go).
//   - reads over every shard (barrierEvery: a barrier in each, all at once)
//     sum or walk each shard's part: getEphemerals, getAllChildrenNumber
//     (zk.go), and a session's ephemeral_count (GetSession, ListSessions),
//     which each shard counts in its record of the session. StateCounts,
//     for the four-letter words, sums the shards' local node counts
//     without a barrier.
//   - quotas (quotas.go): a quota change in shard 0 is synced to every
//     shard before it is answered; a write refused for want of its shard's
//     allotment (RedoQuotaRoom) moves room from other shards (give, take,
//     settle) and is proposed again; a loop finishes the transfers a
//     crashed server left and re-syncs tables behind shard 0's.
//
// Watches live in one registry (watch.Registry) fed by every group through
// its watch.Shard; a watch holds a record in each shard its events come
// from, added under that group's read lock at its applied index, and a
// session's events of every shard share its one stream (watches.go).
//
// With more than one shard, a coordination loop (shardcoord.go) keeps every
// shard group's membership equal to the meta group's, and the meta leader
// balances the shard leaderships over the voters.
//
// The listings (listings.go: every lock, election and live session, a page
// at a time) and ClusterHealth (health.go) are read-only views for
// operators and the dashboard. ClusterHealth makes no request: every member
// sends its role and indexes in every group to every other member once a
// second over the peer transport (statusreports.go, transport.StatusReport),
// and each answers from the latest report it heard from each member, so
// client-port TLS and auth do not bear on it. The server makes no outgoing
// HTTP request.
//
// Idle shard groups quiesce (quiesce.go; internal/raftnode, "Quiescing"):
// they stop ticking, and the members' status reports stand in for their
// heartbeats: a quiesced group whose leader is no longer heard from or no
// longer leads, or whose leader hears of a member not following it, hears
// from no quorum, or misses a member's acknowledgement of the quiesce,
// ticks again. The meta group never quiesces. Quiescing touches liveness
// only.
//
// A transaction (Txn) and a multi-read (ReadMany) must lie in one group:
// oneGroup checks every path through groupFor before anything is proposed or
// read, so a transaction stays atomic once there are several groups.
//
// The server is the transport's Handler and Snapshots (peers.go): it steps
// raft messages into their group's node, hands heartbeat relays and their
// acknowledgements to the group's sessions.Liveness, keeps the members'
// status reports, and answers members it saw removed with a removal
// notice. It is the replica runtime's Membership (routes for new peers,
// removed members, its own removal) and Metrics.
//
// Backups (backup.go): TakeBackup clones every group's state machine
// (copy-on-write, under the apply lock for O(1)) after a barrier, and the
// Backup streams without any lock, so applying never waits on a backup
// (backupGroups lists the groups, one per shard). Restore
// (restore.go) builds, from a backup file, the data directory of a member of
// a new cluster: sessions ended, the member table and raft voters from
// InitialCluster, the log started BumpIndex above the backup so no fencing
// token or sequential name is issued twice; a backup of N shards restores
// each section as its shard's state.
//
// Time is Config.Clock: the raft nodes, the features and the server's own
// retries and waits read it, so tests run them in virtual time.
package server
