// Package transport carries raft messages between latch servers. It owns
// the peer connections, the wire format, the streaming of snapshot bodies,
// and an in-memory fake network with faults for tests.
//
// Two implementations share the Transport interface:
//
//   - TCP, for real processes. Each node keeps one long-lived outbound
//     connection to every peer (so two connections per pair, one per
//     direction). Send puts messages on a bounded per-peer queue and returns;
//     one writer goroutine per peer drains the queue and writes many
//     length-prefixed frames per flush. One reader goroutine per inbound
//     connection calls Handler.Process. A snapshot travels on its own
//     short-lived connection: the MsgSnap frame, then the body read from
//     Snapshots.Open in CRC-checked chunks, then the receiver stores it with
//     Snapshots.Receive, calls Handler.Process and answers; the sender ends in
//     Handler.ReportSnapshot.
//   - Network, the fake: endpoints joined to it exchange messages through
//     per-link goroutines, with partitions, one-way cuts, drops, delays and
//     crashed nodes under test control.
//
// Invariants:
//   - Send never blocks on the network, on a peer or on the Handler: a
//     message that cannot be queued is dropped and its peer reported
//     unreachable from another goroutine.
//   - Messages from one node to another are delivered in the order they
//     were sent (MsgSnap excepted, which travels on its own stream), with
//     gaps where messages were dropped; never duplicated.
//   - Every MsgSnap passed to Send ends in exactly one ReportSnapshot.
//   - Input from the network never panics: a corrupt or oversized frame or
//     a bad handshake closes that connection with a logged error. A
//     well-formed message that raft cannot have sent on its connection (see
//     TCP.misaddressed) is dropped and counted; the connection, which
//     carries replication, stays up.
//   - A connection whose handshake names another cluster id, or another
//     node id than ours, is refused.
//   - A snapshot body is never held whole in memory: at most one chunk is
//     buffered on each side.
package transport
