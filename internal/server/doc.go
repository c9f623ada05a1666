// Package server is one latch server process: it opens the data directory
// (WAL, snapshot files), runs the peer transport, starts one replica runtime
// (package replica) per consensus group with its features (package sessions
// for session liveness and the heartbeat relay, package queues for locks and
// elections, the watch registry), and keeps membership, configuration,
// status, metrics and lifecycle. It is the API package httpapi serves.
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
