package wal

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/vfs"
)

// TestZeroedSpareSegments: on a real filesystem with ZeroSegments, the
// log moves from the segment Open made to zeroed spares and rolls onto
// them; what it acknowledged reads back after a reopen, the spare is gone
// after Close, and a spare left by a killed process is removed by Open and
// never read as a segment.
func TestZeroedSpareSegments(t *testing.T) {
	fs, dir := vfs.OS(), filepath.Join(t.TempDir(), "wal")
	opts := quietOptions(256 << 10)
	opts.ZeroSegments = true
	w, _, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	model := newModel()
	next := uint64(1)
	save := func() {
		t.Helper()
		batch := entries(1, next, next+9, 1)
		for i := range batch.Entries {
			batch.Entries[i].Data = make([]byte, 1000)
		}
		if err := w.Save(batch); err != nil {
			t.Fatalf("save: %v", err)
		}
		model.apply(batch)
		next += 10
	}
	deadline := time.Now().Add(60 * time.Second)
	for w.Stats().ZeroedSegments < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d entries, %d segments began on a zeroed spare, want 3", next-1, w.Stats().ZeroedSegments)
		}
		save()
	}
	for range 30 { // into the zeroed segment
		save()
	}
	t.Logf("%d entries over %d segments, %d begun on a zeroed spare", next-1, w.SegmentCount(), w.Stats().ZeroedSegments)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(filepath.Join(dir, spareName)); err == nil {
		t.Fatal("the spare segment is still there after Close")
	}

	// A spare of a killed process: garbage under the spare's name.
	stale, err := fs.Create(filepath.Join(dir, spareName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Write([]byte("not a segment")); err != nil {
		t.Fatal(err)
	}
	stale.Close()
	w, states, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("reopen with a stale spare: %v", err)
	}
	defer w.Close()
	if d := model.diff(states[1]); d != "" {
		t.Fatalf("reopened log differs from what was acknowledged: %s", d)
	}
	if _, err := fs.Stat(filepath.Join(dir, spareName)); err == nil {
		t.Fatal("Open left the stale spare")
	}
}
