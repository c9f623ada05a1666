package raftnode

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
)

// TestSnapshotTriggers: a lone node snapshots once SnapshotEvery entries or
// SnapshotBytes of entry data were applied, whichever comes first, and not
// before (beyond the snapshot that its bootstrap's conf change calls for).
func TestSnapshotTriggers(t *testing.T) {
	const proposals = 30 // of 100 bytes each
	cases := []struct {
		name          string
		every, bytes  uint64
		wantSnapshots bool
	}{
		{"by count", 10, 1 << 30, true},
		{"by bytes", 1 << 30, 1000, true},
		{"neither reached", 1 << 30, 1 << 30, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var saved atomic.Int64
			machine := &recordingMachine{}
			network := transport.NewNetwork(1)
			t.Cleanup(network.Close)
			n := startMember(t, member{network: network, id: 1, size: 1, fs: vfs.NewMem(), segmentSize: 1 << 20, config: Config{
				Machine: machine, Clock: clock.Real(), TickInterval: 10 * time.Millisecond,
				SnapshotEvery: tc.every, SnapshotBytes: tc.bytes,
				Hooks: Hooks{SnapshotSave: func(_ time.Duration, err error) {
					if err == nil {
						saved.Add(1)
					}
				}},
			}})
			waitFor(t, "a leader", func() bool { return n.Status().RaftState == raft.StateLeader })
			waitFor(t, "the bootstrap's snapshot", func() bool { return saved.Load() == 1 })
			data := func(i int) string { return fmt.Sprintf("p%03d-%s", i, strings.Repeat("x", 95)) }
			for i := range proposals {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := n.Propose(ctx, []byte(data(i)))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every proposal applied", func() bool { return machine.has(data(proposals - 1)) })
			if tc.wantSnapshots {
				waitFor(t, "a snapshot", func() bool { return saved.Load() > 1 })
				return
			}
			// The snapshot would start on the Ready loop that applied the
			// last entry; one more proposal's round trip shows none did.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.Propose(ctx, []byte(data(proposals))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the last proposal applied", func() bool { return machine.has(data(proposals)) })
			if got := saved.Load() - 1; got != 0 {
				t.Fatalf("%d snapshots with neither trigger reached", got)
			}
		})
	}
}
