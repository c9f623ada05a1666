package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/transport"
)

// The server is the transport's Handler and Snapshots: it routes each frame
// to its group and stores snapshot streams in the snapshot directory.

// Process steps a peer's message into its group's raft node.
func (s *Server) Process(ctx context.Context, group uint64, m raftpb.Message) error {
	if s.removedPeers.has(m.From) {
		s.tellRemoved(m.From)
		return errRemovedPeer
	}
	g := s.lookupGroup(group)
	if g == nil {
		return fmt.Errorf("server: no running group %d", group)
	}
	return g.Node().Step(ctx, m)
}

// ReceivePeer handles a member's typed peer message: a heartbeat relay, its
// acknowledgement, a removal notice, a status report, or a leader's word
// that a group is quiesced and its acknowledgement (quiesce.go).
func (s *Server) ReceivePeer(ctx context.Context, from uint64, m transport.PeerMessage) error {
	switch m := m.(type) {
	case transport.SessionRelay:
		if g := s.metaGroup(); g != nil {
			g.sessions.ReceiveRelay(from, m.SessionIDs)
		}
	case transport.SessionRelayAck:
		if g := s.metaGroup(); g != nil {
			g.sessions.ReceiveRelayAck(from)
		}
	case transport.RemovalNotice:
		s.receiveRemovalNotice(from)
	case transport.StatusReport:
		s.peerReports.record(from, m, s.cfg.Clock.Now())
	case transport.Quiesce:
		s.receiveQuiesce(from, m)
	default:
		return fmt.Errorf("server: unexpected peer message %T", m)
	}
	return nil
}

// ReportUnreachable tells the group's raft that a peer could not be reached.
func (s *Server) ReportUnreachable(group, id uint64) {
	if g := s.lookupGroup(group); g != nil {
		g.Node().ReportUnreachable(id)
	}
}

// ReportSnapshot tells the group's raft how a snapshot send ended.
func (s *Server) ReportSnapshot(group, id uint64, status raft.SnapshotStatus) {
	if g := s.lookupGroup(group); g != nil {
		g.Node().ReportSnapshot(id, status)
	}
}

// Open returns the stored snapshot file that MsgSnap m refers to.
func (s *Server) Open(group uint64, m raftpb.Message) (io.ReadCloser, int64, error) {
	return s.snaps.OpenFile(group, m.Snapshot.Metadata.Index)
}

// Receive stores an incoming snapshot file durably, before raft sees m.
func (s *Server) Receive(group uint64, m raftpb.Message, body io.Reader) error {
	meta, err := s.snaps.ReceiveFile(group, m.Snapshot.Metadata.Index, body)
	if err != nil {
		return err
	}
	if meta.Index != m.Snapshot.Metadata.Index || meta.Term != m.Snapshot.Metadata.Term {
		return fmt.Errorf("server: snapshot stream holds %d/%d, message says %d/%d",
			meta.Index, meta.Term, m.Snapshot.Metadata.Index, m.Snapshot.Metadata.Term)
	}
	return nil
}

// A member removed from the cluster may never apply its own removal: once
// the leader has applied it, raft sends that member nothing more, so it may
// not learn the entry was committed. It notices only when its election timer
// makes it campaign; the members that applied the removal then answer its
// messages with a removal notice (transport.RemovalNotice), and it stops.

var errRemovedPeer = errors.New("server: message from a member removed from the cluster")

// membership is the server as the replica runtime's replica.Membership:
// routes for new peers, the removed members, and its own removal.
type membership Server

func (m *membership) PeerAdded(id uint64, peerURL string) { m.transport.AddPeer(id, peerURL) }
func (m *membership) PeerRemoved(id uint64)               { m.removedPeers.add(id) }
func (m *membership) SelfRemoved()                        { (*Server)(m).removed() }

// removedSet remembers the members this server saw removed (since it started).
type removedSet struct {
	any atomic.Bool // set once a member was removed: every peer message checks it

	mu       sync.Mutex
	notified map[uint64]time.Time // guarded by mu: when each was last told (a reading of Config.Clock)
}

func (r *removedSet) add(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notified == nil {
		r.notified = map[uint64]time.Time{}
	}
	r.notified[id] = time.Time{}
	r.any.Store(true)
}

func (r *removedSet) has(id uint64) bool {
	if !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.notified[id]
	return ok
}

// due reports whether id should be told again (at most once a second).
func (r *removedSet) due(id uint64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.notified[id]) < time.Second {
		return false
	}
	r.notified[id] = now
	return true
}

// tellRemoved sends a removed member its removal notice.
func (s *Server) tellRemoved(id uint64) {
	if s.removedPeers.due(id, s.cfg.Clock.Now()) {
		s.transport.SendPeer(id, transport.RemovalNotice{})
	}
}

// receiveRemovalNotice stops this server when a member tells it that it was
// removed from the cluster.
func (s *Server) receiveRemovalNotice(from uint64) {
	if s.metaGroup() != nil && s.memberByID(from).ID != 0 {
		s.log.Warn("a member reports this server was removed from the cluster", "from", api.FormatID(from))
		go s.removed()
	}
}

// transportMetrics registers the peer transport's counters, when it keeps
// them (the TCP transport does; the test fake does not).
func (s *Server) transportMetrics() {
	stats, ok := s.transport.(interface{ Stats() transport.Stats })
	if !ok {
		return
	}
	counter := func(name, help string, value func(transport.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(value(stats.Stats())) })
	}
	s.metrics.registry.MustRegister(
		counter("latch_transport_frames_rejected_total",
			"Inbound peer connections closed for a bad handshake or a corrupt or oversized frame.",
			func(st transport.Stats) uint64 { return st.FramesRejected }),
		counter("latch_transport_messages_misaddressed_total",
			"Inbound peer messages dropped because raft cannot have sent them on their connection.",
			func(st transport.Stats) uint64 { return st.MessagesMisaddressed }),
		counter("latch_transport_peer_frames_dropped_total",
			"Inbound peer messages (heartbeat relays, acknowledgements, removal notices, status reports, quiesce notices) dropped because they did not decode.",
			func(st transport.Stats) uint64 { return st.PeerFramesDropped }),
		counter("latch_transport_messages_dropped_total",
			"Outbound peer messages dropped: queue full, peer down, unknown or removed.",
			func(st transport.Stats) uint64 { return st.MessagesDropped }),
		counter("latch_transport_connections_failed_total",
			"Peer dials, handshakes or connections that failed.",
			func(st transport.Stats) uint64 { return st.ConnectionsFailed }),
	)
}
