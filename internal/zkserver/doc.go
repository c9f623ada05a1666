// Package zkserver is latch's ZooKeeper-protocol listener: it serves
// ZooKeeper's client protocol (3.4 to 3.9 clients, codec in package
// zkproto) over the same server API that package httpapi serves, so that
// existing ZooKeeper clients and their recipes run against latch
// unchanged. docs/zookeeper.md is its user contract: every opcode, its
// mapping onto latch and every difference from ZooKeeper.
//
// It owns the connections of that port: the four-letter words, the connect
// handshake (a ZooKeeper session is a latch session, same id; the session
// password is derived from the id, see password.go), the per-connection
// request pipeline, the mapping of each opcode onto server calls, and the
// connection's ZooKeeper watches, kept over latch watches of the session.
//
// Invariants:
//   - replies leave a connection in the order its requests came, each with
//     a zxid (a raft index) at least the index of the state its request and
//     those before it read or wrote, never below a zxid the connection sent
//     before; requests of a connection run concurrently, but a read only
//     after the connection's earlier writes, a write only after the earlier
//     reads (and, with several shards, the earlier writes), and session,
//     auth, watch and sync requests alone (pipeline.go);
//   - a connection's writes take effect in the order sent: with one shard
//     they are in flight together, each proposed in its turn of the
//     connection's write stream and applied by the state machine only
//     after the one before it (internal/fsm, stream.go); a write refused
//     for its order, or of unknown outcome, ends the connection unanswered,
//     and no later write of the connection is applied without it;
//   - no frame of a connection carries a zxid at or past a change before
//     every notification that change causes on the connection was sent (a
//     client reconnecting with that zxid would never get it from
//     setWatches): a frame's zxid is capped at the index through which the
//     connection's events were dispatched and below every notification it
//     still owes (held behind a reply, or waiting in a watch not yet armed),
//     which on one shard is never below the reply's own floor
//     (conn.zxidLocked has the argument);
//   - a read on a connection never sees state older than the last zxid the
//     client saw (given at connect as lastZxidSeen, or sent since), on any
//     member: a connect whose lastZxidSeen the member has not applied is
//     refused once the member failed to catch up;
//   - bad input (a frame, a record, a path) gets a ZooKeeper error code or
//     closes that connection; it never panics and never changes state;
//   - a create (plain or in a multi) is one replicated transaction of a
//     check that the parent exists and the create (with several shards, a
//     plain create is a put with the server's exact-parent rule): it never
//     makes a missing parent; a multi is one transaction, all or nothing, replying
//     per operation as ZooKeeper does (OK before the refused one, its
//     code, RuntimeInconsistency after);
//   - every request reaches the server with the connection's credentials
//     (auth.go: its certificate's name, its digest user), so it passes the
//     server's one authorization check; with auth enabled, a connection
//     that proves no user holds nothing in the replicated state until its
//     addauth succeeds;
//   - a connection holds only latch watches it registered, all cancelled
//     when it closes; a one-shot ZooKeeper watch fires at most once, and
//     only for a change applied after the read that set it.
package zkserver
