package server

import (
	"context"
	"fmt"
	"io"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The server is the transport's Handler and Snapshots: it routes each frame
// to its group and stores snapshot streams in the snapshot directory.

// Process steps a peer's message into its group's raft node.
func (s *Server) Process(ctx context.Context, group uint64, m raftpb.Message) error {
	if group == relayGroup {
		return s.receiveRelay(m)
	}
	g := s.lookupGroup(group)
	if g == nil {
		return fmt.Errorf("server: no running group %d", group)
	}
	return g.node.Step(ctx, m)
}

// ReportUnreachable tells the group's raft that a peer could not be reached.
func (s *Server) ReportUnreachable(group, id uint64) {
	if g := s.lookupGroup(group); g != nil {
		g.node.ReportUnreachable(id)
	}
}

// ReportSnapshot tells the group's raft how a snapshot send ended.
func (s *Server) ReportSnapshot(group, id uint64, status raft.SnapshotStatus) {
	if g := s.lookupGroup(group); g != nil {
		g.node.ReportSnapshot(id, status)
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
