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
// A transaction (Txn) and a multi-read (ReadMany) must lie in one group:
// oneGroup checks every path through groupFor before anything is proposed or
// read, so a transaction stays atomic once there are several groups.
//
// Every request finds its group through groupFor(path) (tree reads and
// writes, locks, elections, watches) or metaGroup() (membership, sessions,
// status): one group runs today, and every WAL record and peer frame already
// carries the group id, so sharding changes those two functions.
//
// The server is the transport's Handler and Snapshots (peers.go): it steps
// raft messages into their group's node, hands heartbeat relays and their
// acknowledgements to the group's sessions.Liveness, and answers members it
// saw removed with a removal notice. It is the replica runtime's Membership
// (routes for new peers, removed members, its own removal) and Metrics.
//
// Time is Config.Clock: the raft nodes, the features and the server's own
// retries and waits read it, so tests run them in virtual time.
package server
