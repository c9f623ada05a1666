package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Handler receives what the transport delivers. The server implements it.
//
// Process and ReceivePeer are called from one reader goroutine per inbound
// connection, so the messages of one peer arrive in the order that peer sent
// them, raft and peer messages alike. The Report
// methods are called from transport goroutines, never from inside Send; they
// may be called concurrently with each other and with Process.
type Handler interface {
	// Process hands an inbound message of consensus group group to raft.
	Process(ctx context.Context, group uint64, m raftpb.Message) error
	// ReceivePeer hands over a peer message (SessionRelay, SessionRelayAck,
	// RemovalNotice, StatusReport or Quiesce) sent by member from. Raft never
	// sees these.
	ReceivePeer(ctx context.Context, from uint64, m PeerMessage) error
	// ReportUnreachable tells group's raft node that messages to peer id were dropped.
	ReportUnreachable(group, id uint64)
	// ReportSnapshot tells group's raft node how a MsgSnap to peer id ended.
	ReportSnapshot(group, id uint64, status raft.SnapshotStatus)
}

// Snapshots gives the transport access to snapshot files. The server
// implements it over internal/snap. A MsgSnap carries only a small reference
// in Snapshot.Data; the body is the file, streamed in chunks on its own
// connection and never held whole in memory.
type Snapshots interface {
	// Open is called on the sender to read the stored snapshot body that m
	// refers to; it returns the body and its exact length in bytes.
	Open(group uint64, m raftpb.Message) (io.ReadCloser, int64, error)
	// Receive is called on the receiver with the body as it arrives; it must
	// read body to EOF and store it durably before returning nil. The
	// transport then calls Handler.Process(group, m). body returns an error
	// if the stream is cut or corrupt, and Receive must then fail.
	Receive(group uint64, m raftpb.Message, body io.Reader) error
}

// Transport sends raft messages and peer messages to peers. Every method is safe for
// concurrent use.
type Transport interface {
	// Send queues msgs for their destinations and returns at once: it never
	// blocks on the network or on a slow peer. A message that cannot be
	// queued (queue full, peer down or unknown) is dropped and reported
	// through Handler.ReportUnreachable. A MsgSnap goes to the snapshot path
	// and always ends in Handler.ReportSnapshot with SnapshotFinish or
	// SnapshotFailure. Messages to one peer are delivered in the order they
	// were passed to Send, except MsgSnap, which travels separately.
	Send(group uint64, msgs []raftpb.Message)
	// SendPeer queues a peer message for member to and returns at once, as
	// Send does, on the same ordered stream as raft's messages. A peer
	// message that cannot be queued or sent is dropped and counted, and no
	// group is told: it belongs to none.
	SendPeer(to uint64, m PeerMessage)
	// AddPeer makes peer id reachable at addr. It is idempotent and also
	// updates the address of a known peer.
	AddPeer(id uint64, addr string)
	// RemovePeer forgets peer id; messages to it are then dropped.
	RemovePeer(id uint64)
	// Close stops every goroutine and closes every connection. Send after
	// Close drops silently.
	Close() error
}

// Stats counts what a transport did since it started. Every field only grows.
type Stats struct {
	MessagesSent      uint64 // raft and peer messages written to a peer connection
	BytesSent         uint64 // frame bytes written, headers included
	MessagesDropped   uint64 // raft and peer messages not sent: queue full, peer down, unknown or removed
	MessagesReceived  uint64 // messages handed to Handler.Process
	BytesReceived     uint64 // frame bytes read, headers included
	ConnectionsFailed uint64 // dials, handshakes or connections that failed
	FramesRejected    uint64 // inbound connections closed for a corrupt or oversized frame or bad handshake
	// MessagesMisaddressed counts well-formed inbound messages dropped, their
	// connection kept, because raft cannot have sent them on it: addressed to
	// another node, or from a node other than the connection's peer (a
	// forwarded MsgTransferLeader excepted).
	MessagesMisaddressed uint64
	PeerMessagesReceived uint64 // peer messages handed to Handler.ReceivePeer
	// PeerFramesDropped counts inbound peer frames dropped, their connection
	// kept, because they did not decode: bad checksum, version, type or fields.
	PeerFramesDropped uint64
	SnapshotsSent     uint64 // snapshots acknowledged by their receiver
	SnapshotsFailed   uint64 // snapshots whose sending failed
	SnapshotsReceived uint64 // snapshots stored and processed
}

// Config configures a TCP transport. ID, ClusterID, Handler and one of
// Listener or ListenAddr are required; zero durations and sizes take the
// defaults named on each field.
type Config struct {
	ID        uint64 // this node's raft id; never 0
	ClusterID uint64 // peers with another cluster id are refused in the handshake
	// Shards is the cluster's shard count (default 1); peers with another
	// count are refused in the handshake. At most 65535.
	Shards int
	// Listener accepts peer connections; the transport owns and closes it.
	// If nil, the transport listens on ListenAddr.
	Listener   net.Listener
	ListenAddr string
	Handler    Handler
	Snapshots  Snapshots // nil refuses snapshots in both directions
	Logger     *slog.Logger
	// ServerTLS, when set, makes every accepted connection speak TLS with
	// it before the handshake; members authenticate each other when it
	// requires and verifies client certificates. Set ClientTLS with it.
	ServerTLS *tls.Config
	// ClientTLS, when set, returns the TLS config of one dial to host (the
	// peer address's host, which the peer's certificate must name); it is
	// called per dial so that rotated certificates are used.
	ClientTLS func(host string) *tls.Config

	QueueSize         int           // messages queued per peer before drops; default 4096
	MaxFrameSize      int           // largest accepted message frame in bytes; default 64 MiB
	SnapshotChunkSize int           // bytes per snapshot chunk; default 256 KiB
	DialTimeout       time.Duration // default 1 s
	WriteTimeout      time.Duration // deadline for one flush or one snapshot chunk; default 5 s
	HandshakeTimeout  time.Duration // default 5 s
	SnapshotTimeout   time.Duration // wait for a snapshot receiver's acknowledgement after the body; default 2 min
	MinBackoff        time.Duration // first redial delay after a failure; default 50 ms
	MaxBackoff        time.Duration // redial delay cap; default 1 s
}

// Sentinel errors.
var (
	// ErrClusterMismatch means a peer belongs to another cluster.
	ErrClusterMismatch = errors.New("transport: cluster id mismatch")
	// ErrShardMismatch means a peer runs with another shard count.
	ErrShardMismatch = errors.New("transport: shard count mismatch: the peer runs with another --shards")
	// ErrWrongPeer means a peer expected another node id at this address.
	ErrWrongPeer = errors.New("transport: connection meant for another node id")
	// ErrFrameTooLarge means a frame's declared length exceeds the limit.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrCorrupt means an inbound stream broke the framing protocol.
	ErrCorrupt = errors.New("transport: corrupt stream")
	// ErrClosed means the transport was closed.
	ErrClosed = errors.New("transport: closed")
	// ErrTLSConfig means ServerTLS and ClientTLS were not set together.
	ErrTLSConfig = errors.New("transport: config: ServerTLS and ClientTLS go together")
	// ErrNoSnapshots means the node has no Snapshots to read or store bodies.
	ErrNoSnapshots = errors.New("transport: snapshots not configured")
)
