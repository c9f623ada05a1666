package wal

import (
	"testing"
	"time"

	"github.com/latch-io/latch/internal/vfs"
)

// TestOneFsyncCoversSeveralGroups holds the fsync of one group's save while
// four other groups (shards of one process) save: the four are written as
// one flush under one fsync, and each reads back after a crash.
func TestOneFsyncCoversSeveralGroups(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 64<<10)
	hold := make(chan struct{})
	syncsBefore := fs.Calls(vfs.OpSync)
	statsBefore := w.Stats()
	remove := fs.Inject(vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Count: 1, Hold: hold})
	defer remove()
	first := make(chan error, 1)
	go func() { first <- w.Save(entries(1, 1, 1, 1)) }()
	if !waitUntil(10*time.Second, func() bool { return fs.Calls(vfs.OpSync) == syncsBefore+1 }) {
		t.Fatal("the first save never reached its fsync")
	}
	const others = 4
	done := make(chan error, others)
	for group := uint64(2); group < 2+others; group++ {
		go func() { done <- w.Save(entries(group, 1, 3, 1)) }()
	}
	if !waitUntil(10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.pending) == others
	}) {
		t.Fatal("the other groups' saves were never all queued behind the held fsync")
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatalf("first save: %v", err)
	}
	for range others {
		if err := <-done; err != nil {
			t.Fatalf("save: %v", err)
		}
	}
	if syncs := fs.Calls(vfs.OpSync) - syncsBefore; syncs != 2 {
		t.Fatalf("%d fsyncs for the held save and %d saves of other groups queued behind it, want 2", syncs, others)
	}
	stats := w.Stats()
	got := Stats{stats.Flushes - statsBefore.Flushes, stats.Saves - statsBefore.Saves, stats.Groups - statsBefore.Groups, stats.Entries - statsBefore.Entries}
	if want := (Stats{Flushes: 2, Saves: 1 + others, Groups: 1 + others, Entries: 1 + 3*others}); got != want {
		t.Fatalf("stats of the two flushes: %+v, want %+v", got, want)
	}
	w.Close()
	_, states := mustOpen(t, fs.CrashClone(vfs.CrashOptions{}), 64<<10)
	for group := uint64(2); group < 2+others; group++ {
		if got := len(states[group].Entries); got != 3 {
			t.Fatalf("group %d: %d entries after a crash, want 3", group, got)
		}
	}
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// TestPinsOldestNamesTheGroupHoldingBackRelease: with two segments, the
// group whose entries in the first no snapshot covers pins it, until its
// snapshot is released; a group with no entries there never pins it.
func TestPinsOldestNamesTheGroupHoldingBackRelease(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 2048)
	defer w.Close()
	mustSave(t, w, entries(2, 1, 2, 1)) // the idle group: two entries, then nothing
	for call := uint64(0); w.SegmentCount() < 3; call++ {
		mustSave(t, w, entries(1, call*3+1, call*3+3, 1))
	}
	if w.PinsOldest(3) {
		t.Fatal("group 3, with no entries, pins the oldest segment")
	}
	if !w.PinsOldest(2) {
		t.Fatal("idle group 2 does not pin the oldest segment")
	}
	mustSave(t, w, Batch{Group: 2, Snapshot: &SnapshotMarker{Index: 2, Term: 1}})
	if err := w.Release(2, 2); err != nil {
		t.Fatal(err)
	}
	if w.PinsOldest(2) {
		t.Fatal("group 2 still pins the oldest segment after its snapshot was released")
	}
}
