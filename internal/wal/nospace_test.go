package wal

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/latch-io/latch/internal/vfs"
)

// TestNoSpaceRefusesWithoutFailing fills the filesystem when a segment must
// be made (its creation or its preallocation fails with ENOSPC): Save
// returns ErrNoSpace and writes nothing, the WAL does not fail, the same
// call succeeds once space is back, and every acknowledged entry survives a
// crash. Also for an oversized flush whose segment cannot grow.
func TestNoSpaceRefusesWithoutFailing(t *testing.T) {
	tests := []struct {
		name  string
		fault vfs.Fault
		size  int // payload bytes per entry (0: a short one)
	}{
		{name: "preallocate-new-segment", fault: vfs.Fault{Ops: vfs.OpPreallocate, Err: syscall.ENOSPC}, size: 0},
		{name: "create-new-segment", fault: vfs.Fault{Ops: vfs.OpCreate, Pattern: "*.wal", Err: syscall.ENOSPC}, size: 0},
		{name: "quota", fault: vfs.Fault{Ops: vfs.OpPreallocate, Err: syscall.EDQUOT}, size: 0},
		{name: "grow-for-oversized-flush", fault: vfs.Fault{Ops: vfs.OpPreallocate, Err: syscall.ENOSPC}, size: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			w, _ := mustOpen(t, fs, 1024)
			remove := fs.Inject(tt.fault)
			acknowledged := uint64(0)
			var refused Batch
			for call := uint64(0); call < 200; call++ {
				batch := sizedEntry(call+1, tt.size)
				err := w.Save(batch)
				if err == nil {
					acknowledged = call + 1
					continue
				}
				if !errors.Is(err, ErrNoSpace) {
					t.Fatalf("save %d: %v, want ErrNoSpace", call, err)
				}
				refused = batch
				break
			}
			if refused.Entries == nil {
				t.Fatal("no save was refused for want of space")
			}
			if err := w.Save(refused); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("the same save again, still full: %v, want ErrNoSpace", err)
			}
			if err := w.Release(1, 1); err != nil {
				t.Fatalf("release while full: %v (the WAL must not have failed)", err)
			}
			remove()
			if err := w.Save(refused); err != nil {
				t.Fatalf("the refused save once space is back: %v", err)
			}
			acknowledged++
			for call := acknowledged; call < acknowledged+5; call++ {
				if err := w.Save(sizedEntry(call+1, tt.size)); err != nil {
					t.Fatalf("save after recovery: %v", err)
				}
			}
			acknowledged += 5
			w.Close()
			_, states := mustOpen(t, fs.CrashClone(vfs.CrashOptions{}), 1024)
			entries := states[1].Entries
			if n := uint64(len(entries)); n == 0 || entries[n-1].Index != acknowledged {
				t.Fatalf("after a crash the log ends at %d entries, want through index %d", n, acknowledged)
			}
		})
	}
}

// sizedEntry is a batch of group 1 holding entry index, of size bytes if
// size > 0 (larger than a segment: a flush of its own that must grow it).
func sizedEntry(index uint64, size int) Batch {
	batch := entries(1, index, index, 1)
	if size > 0 {
		batch.Entries[0].Data = bytes.Repeat([]byte{'x'}, size)
	}
	return batch
}
