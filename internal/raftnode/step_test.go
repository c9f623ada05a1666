package raftnode

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

type nopMachine struct{}

func (nopMachine) Apply([]raftpb.Entry) error                                          { return nil }
func (nopMachine) ApplyConfChange(uint64, raftpb.ConfChangeV2, raftpb.ConfState) error { return nil }
func (nopMachine) Snapshot() func(io.Writer) error                                     { return func(io.Writer) error { return nil } }
func (nopMachine) Restore(snap.Meta, io.Reader) error                                  { return nil }

type nopHandler struct{}

func (nopHandler) Process(context.Context, uint64, raftpb.Message) error            { return nil }
func (nopHandler) ReceivePeer(context.Context, uint64, transport.PeerMessage) error { return nil }
func (nopHandler) ReportUnreachable(uint64, uint64)                                 {}
func (nopHandler) ReportSnapshot(uint64, uint64, raft.SnapshotStatus)               {}

// TestForwardedProposalWithoutLeaderReturns: a node that knows no leader
// must not block the caller (a peer's inbound stream) on a forwarded
// proposal; raft would hold it until a leader appears.
func TestForwardedProposalWithoutLeaderReturns(t *testing.T) {
	fs := vfs.NewMem()
	w, recovered, err := wal.Open(fs, "/wal", wal.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	snaps, err := snap.New(fs, "/snap", snap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	network := transport.NewNetwork(1)
	defer network.Close()
	// A member of a 3-node group whose peers never answer: it stays leaderless.
	n, err := Start(Config{
		ID: 1, Group: 1, Peers: []raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}, Recovered: recovered[1],
		WAL: w, Snapshots: snaps, Transport: network.Join(1, nopHandler{}, nil), Machine: nopMachine{},
		TickInterval: time.Hour, // no elections during the test
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	done := make(chan error, 1)
	go func() {
		done <- n.Step(context.Background(), raftpb.Message{Type: raftpb.MsgProp, From: 2, To: 1, Entries: []raftpb.Entry{{Data: []byte("x")}}})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, raft.ErrProposalDropped) {
			t.Fatalf("Step of a forwarded proposal without a leader: %v, want raft.ErrProposalDropped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Step of a forwarded proposal blocked while the node knows no leader")
	}
}
