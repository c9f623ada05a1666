package raftnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// storageEvents records the StorageFull hook's calls.
type storageEvents struct {
	mu     sync.Mutex
	events []string // "wal full", "wal ok", ...
}

func (e *storageEvents) hook(part string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	state := "ok"
	if err != nil {
		state = "full"
	}
	e.events = append(e.events, part+" "+state)
}

func (e *storageEvents) saw(event string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, got := range e.events {
		if got == event {
			return true
		}
	}
	return false
}

// TestFullDiskStallsThenRecovers: a lone node whose WAL cannot get a new
// segment (ENOSPC on preallocation) and whose snapshots cannot be written
// does not fail: it reports the WAL and the snapshot store full, applies
// nothing it could not persist, and once space is back persists, applies
// every proposal, snapshots, and reports both ok again.
func TestFullDiskStallsThenRecovers(t *testing.T) {
	fs := vfs.NewMem()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	events := &storageEvents{}
	machine := &recordingMachine{}
	network := transport.NewNetwork(1)
	t.Cleanup(network.Close)
	n := startMember(t, member{network: network, id: 1, size: 1, fs: fs, segmentSize: 4096, config: Config{
		Machine: machine, Clock: clock.Real(), TickInterval: 10 * time.Millisecond, SnapshotEvery: 10,
		Hooks: Hooks{StorageFull: events.hook},
	}})
	waitFor(t, "a leader", func() bool { return n.Status().RaftState == raft.StateLeader })

	full := fs.Inject(vfs.Fault{Ops: vfs.OpPreallocate | vfs.OpCreate, Err: syscall.ENOSPC})
	const proposals = 60 // ~100 bytes each: several 4 KiB segments, and snapshots every 10
	data := func(i int) string { return fmt.Sprintf("p%03d-%s", i, strings.Repeat("x", 96)) }
	propose := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return n.Propose(ctx, []byte(data(i)))
	}
	// The first 12 fit in the first segment, so they are applied, and the
	// snapshot due at 10 finds no space.
	for i := range 12 {
		if err := propose(i); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "proposal applied", func() bool { return machine.has(data(i)) })
	}
	waitFor(t, "the snapshot store to report the disk full", func() bool { return events.saw("snapshot full") })
	proposed := make(chan error, 1)
	go func() {
		for i := 12; i < proposals; i++ {
			if err := propose(i); err != nil {
				proposed <- err
				return
			}
		}
		proposed <- nil
	}()
	waitFor(t, "the WAL to report the disk full", func() bool { return events.saw("wal full") })
	if err := n.Err(); err != nil {
		t.Fatalf("the node failed on a full disk: %v", err)
	}
	// Nothing is applied that is not durable: a power cut now keeps every
	// entry applied so far.
	machine.mu.Lock()
	applied := len(machine.applied)
	machine.mu.Unlock()
	_, durable, err := wal.Open(fs.CrashClone(vfs.CrashOptions{}), "/wal", wal.Options{SegmentSize: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if kept := countData(durable[1]); kept < applied {
		t.Fatalf("%d entries applied while full, but a crash keeps %d", applied, kept)
	}
	full()
	if err := <-proposed; err != nil {
		t.Fatalf("propose: %v", err)
	}
	waitFor(t, "every proposal applied", func() bool { return machine.has(data(proposals - 1)) })
	waitFor(t, "the WAL to report writing again", func() bool { return events.saw("wal ok") })
	waitFor(t, "a snapshot written again", func() bool { return events.saw("snapshot ok") })
	if err := n.Err(); err != nil {
		t.Fatalf("node failed: %v", err)
	}
}

// countData counts the entries with data in a recovered group.
func countData(state *wal.GroupState) int {
	if state == nil {
		return 0
	}
	n := 0
	for _, e := range state.Entries {
		if len(e.Data) > 0 {
			n++
		}
	}
	return n
}
