// Package transport carries raft messages between latch servers, and the
// servers' own typed peer messages (the session heartbeat relay, its
// acknowledgement, the removal notice, the status report and the quiesce
// notice; see peermsg.go). It owns the peer
// connections, the wire format, the streaming of snapshot bodies, and an
// in-memory fake network with faults for tests.
//
// Two implementations share the Transport interface:
//
//   - TCP, for real processes. Each node keeps one long-lived outbound
//     connection to every peer (so two connections per pair, one per
//     direction). Send puts messages on a bounded per-peer queue and returns;
//     one writer goroutine per peer drains the queue and writes many
//     length-prefixed frames per flush; SendPeer's messages share the queue
//     and the connection in frames of their own. One reader goroutine per
//     inbound connection calls Handler.Process for raft frames and
//     Handler.ReceivePeer for peer frames. A snapshot travels on its own
//     short-lived connection: the MsgSnap frame, then the body read from
//     Snapshots.Open in CRC-checked chunks, then the receiver stores it with
//     Snapshots.Receive, calls Handler.Process and answers; the sender ends in
//     Handler.ReportSnapshot.
//   - Network, the fake: endpoints joined to it exchange messages through
//     per-link goroutines, with partitions, one-way cuts, drops, delays and
//     crashed nodes under test control.
//
// With Config.ServerTLS and Config.ClientTLS every connection, message
// streams and snapshots alike, is a TLS stream and the handshake below runs
// inside it; the TLS configs (internal/tlsconfig) make it mutual, so a
// member accepts only dialers with a certificate from the peer CA and dials
// only listeners with one.
//
// Invariants:
//   - Send never blocks on the network, on a peer or on the Handler: a
//     message that cannot be queued is dropped and its peer reported
//     unreachable from another goroutine.
//   - Messages from one node to another are delivered in the order they
//     were sent (MsgSnap excepted, which travels on its own stream), with
//     gaps where messages were dropped; never duplicated.
//   - Every MsgSnap passed to Send ends in exactly one ReportSnapshot.
//   - Raft never sees a peer message and the server never reads a raft
//     message as one of its own: the frame kind says which is which.
//   - Input from the network never panics: a corrupt or oversized frame or
//     a bad handshake closes that connection with a logged error. A
//     well-formed message that raft cannot have sent on its connection (see
//     TCP.misaddressed) is dropped and counted; the connection, which
//     carries replication, stays up; so is a peer frame that does not
//     decode (Stats.PeerFramesDropped).
//   - With TLS configured, nothing is read from or written to a connection
//     in clear: a failed TLS handshake closes it, logged and counted in
//     Stats.ConnectionsFailed (dialer) or Stats.FramesRejected (acceptor).
//   - A connection whose handshake names another cluster id, another
//     shard count (Config.Shards; one connection carries every shard's
//     messages), or another node id than ours, is refused; a shard count
//     refusal is logged naming both counts.
//   - A snapshot body is never held whole in memory: at most one chunk is
//     buffered on each side.
package transport
