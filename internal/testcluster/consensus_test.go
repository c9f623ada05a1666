package testcluster

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// TestUndecodableEntryStopsEveryReplica commits an entry no replica can
// decode, as a peer running a binary with another command format would
// propose it (a raw MsgProp through the leader's transport handler). Every
// replica stops before applying it, with an error naming its raft index and
// why, instead of skipping it: a replica that could decode it would diverge.
// Until the process exits, the member is not ready and serves no read, not
// even a stale one.
func TestUndecodableEntryStopsEveryReplica(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	if _, err := Put(ctx, c.URL(leader), "/before", "v", ""); err != nil {
		t.Fatalf("put: %v", err)
	}
	peer := c.Others(leader)[0]
	garbage := raftpb.Message{Type: raftpb.MsgProp, From: c.Nodes[peer].ID, To: c.Nodes[leader].ID,
		Entries: []raftpb.Entry{{Data: []byte{0xee, 0x01, 0x02, 0x03}}}}
	if err := c.Nodes[leader].Server.Process(ctx, 1, garbage); err != nil {
		t.Fatalf("leader did not take the proposal: %v", err)
	}

	for i, n := range c.Nodes {
		select {
		case <-n.Server.Done():
		case <-ctx.Done():
			t.Fatalf("%s still running: the undecodable entry was skipped", n.Name)
		}
		var undecodable *server.UndecodableEntryError
		err := n.Server.Err()
		if !errors.As(err, &undecodable) || !errors.Is(err, server.ErrUndecodableEntry) {
			t.Fatalf("%s stopped with %v, want an UndecodableEntryError", n.Name, err)
		}
		if applied := n.Server.AppliedIndex(); applied != undecodable.Index-1 {
			t.Errorf("%s applied up to %d, want %d: just before the undecodable entry", n.Name, applied, undecodable.Index-1)
		}
		t.Logf("%s: %v", n.Name, err)
		if err := Do(ctx, http.MethodGet, c.URL(i), "/readyz", nil, nil, nil); api.CodeOf(err) != api.CodeUnavailable {
			t.Errorf("%s /readyz answered %v, want 503", n.Name, err)
		}
		if _, err := Get(ctx, c.URL(i), "/before", api.Stale); api.CodeOf(err) != api.CodeUnavailable {
			t.Errorf("%s served a stale read after stopping: %v", n.Name, err)
		}
	}
}
