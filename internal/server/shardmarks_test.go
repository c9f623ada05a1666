package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
)

// startShardedMember starts a one-member cluster of shards shards, in
// memory, and waits until it leads every shard.
func startShardedMember(t *testing.T, shards int) *Server {
	t.Helper()
	network := transport.NewNetwork(1)
	s, err := New(Config{
		Name: "a", DataDir: "/data", ClientAddr: "127.0.0.1:1", PeerAddr: "fake-a:2380", Shards: shards,
		InitialCluster: map[string]string{"a": "fake-a:2380"}, FS: vfs.NewMem(), RequestTimeout: time.Second,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, UnsafeNoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewTransport: func(id uint64, h transport.Handler, snaps transport.Snapshots) (transport.Transport, error) {
			return network.Join(id, h, snaps), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for _, g := range s.allGroups() {
		for g.Leader() != s.id {
			if time.Now().After(deadline) {
				t.Fatalf("shard %d elected no leader", g.shard)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s
}

// TestMarksLeftBehindAreFinished: a delete that stopped after marking a
// directory closing (as if its server crashed) is finished by the shard's
// leader: the directory is deleted, and a mark whose directory has a child
// is removed again, so creates under it go on.
func TestMarksLeftBehindAreFinished(t *testing.T) {
	const shards = 4
	s := startShardedMember(t, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, _ := placement.New(shards)
	var empty, full string
	for i := 0; empty == "" || full == ""; i++ {
		d := fmt.Sprintf("/m%d", i)
		if m.ChildShard(d) == m.Shard(d) {
			continue
		}
		if empty == "" {
			empty = d
		} else {
			full = d
		}
	}
	for _, p := range []string{empty, full + "/child"} {
		if _, err := s.Put(ctx, PutRequest{Path: p}); err != nil {
			t.Fatalf("put %s: %v", p, err)
		}
	}
	for _, dir := range []string{empty, full} {
		res, _, err := s.groupFor(dir).Propose(ctx, &command.Command{Op: command.OpDirMark, Path: dir})
		if err != nil || res.Err != nil || res.Mark == 0 {
			t.Fatalf("mark %s: %+v, %v", dir, res, err)
		}
	}
	// The mark refuses a second delete meanwhile.
	if _, err := s.Delete(ctx, DeleteRequest{Path: empty}); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("delete of a directory being deleted: %v, want precondition_failed", err)
	}
	for !finished(ctx, s, empty, full) {
		select {
		case <-ctx.Done():
			t.Fatal("the marks left behind were not finished")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := s.Get(ctx, empty, ReadOptions{}); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("get %s after its delete was finished: %v, want not_found", empty, err)
	}
	if _, err := s.Put(ctx, PutRequest{Path: full + "/second"}); err != nil {
		t.Fatalf("a create under %s after its mark was removed: %v", full, err)
	}
}

// finished reports whether empty is deleted and full no longer closing.
func finished(ctx context.Context, s *Server, empty, full string) bool {
	if _, err := s.Get(ctx, empty, ReadOptions{}); api.CodeOf(err) != api.CodeNotFound {
		return false
	}
	var mark uint64
	s.groupFor(full).View(func(f *fsm.FSM) { mark = f.ClosingMark(full) })
	return mark == 0
}
