package raftnode

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// TestPersistSavesWhatRaftNeedsDurable: a MsgStorageAppend is written to the
// WAL (one fsync) when its term, vote or entries changed, and not when only
// the commit index moved; the in-memory raft log gets every non-empty hard
// state.
func TestPersistSavesWhatRaftNeedsDurable(t *testing.T) {
	fs := vfs.NewMem()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, _, err := wal.Open(fs, "/wal", wal.Options{SegmentSize: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	saves := 0
	n := &Node{
		cfg:     Config{Group: 1, WAL: w, Clock: clock.Real(), Hooks: Hooks{Persisted: func(time.Duration, int) { saves++ }}},
		storage: newMemLog(),
	}
	hardState := func(term, vote, commit uint64) raftpb.HardState {
		return raftpb.HardState{Term: term, Vote: vote, Commit: commit}
	}
	withHardState := func(term, vote, commit uint64) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgStorageAppend, Term: term, Vote: vote, Commit: commit}
	}
	steps := []struct {
		name      string
		append    raftpb.Message
		wantSaved bool
		wantHard  raftpb.HardState // the raft log's hard state afterwards
	}{
		{"first vote", withHardState(1, 1, 0), true, hardState(1, 1, 0)},
		{"commit only", withHardState(1, 1, 1), false, hardState(1, 1, 1)},
		{"entries", raftpb.Message{Type: raftpb.MsgStorageAppend, Entries: []raftpb.Entry{{Index: 1, Term: 1}}}, true, hardState(1, 1, 1)},
		{"new term", withHardState(2, 0, 1), true, hardState(2, 0, 1)},
		{"new vote", withHardState(2, 3, 1), true, hardState(2, 3, 1)},
		{"commit only again", withHardState(2, 3, 2), false, hardState(2, 3, 2)},
		{"empty", raftpb.Message{Type: raftpb.MsgStorageAppend}, false, hardState(2, 3, 2)},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			before := saves
			if err := n.storeAppends([]raftpb.Message{step.append}, nil); err != nil {
				t.Fatalf("persist: %v", err)
			}
			if saved := saves > before; saved != step.wantSaved {
				t.Errorf("saved to the WAL: %v, want %v", saved, step.wantSaved)
			}
			if hs, _, _ := n.storage.InitialState(); hs != step.wantHard {
				t.Errorf("raft log hard state %+v, want %+v", hs, step.wantHard)
			}
		})
	}
	// On disk is the last saved hard state, not the later commit index.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, recovered, err := wal.Open(fs, "/wal", wal.Options{SegmentSize: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, want := recovered[1].HardState, hardState(2, 3, 1); got != want {
		t.Errorf("recovered hard state %+v, want %+v", got, want)
	}
}
