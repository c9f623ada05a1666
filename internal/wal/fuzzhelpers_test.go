package wal

import (
	"path/filepath"
	"testing"

	"github.com/latch-io/latch/internal/vfs"
)

// buildLogForSeed returns the bytes of a small valid segment.
func buildLogForSeed(f *testing.F) []byte {
	fs := vfs.NewMem()
	w, _, err := Open(fs, testDir, quietOptions(4096))
	if err != nil {
		f.Fatal(err)
	}
	for call := uint64(0); call < 3; call++ {
		if err := w.Save(entries(1, call*2+1, call*2+2, 1), Batch{Group: 2, Snapshot: &SnapshotMarker{Index: call, Term: 1}}); err != nil {
			f.Fatal(err)
		}
	}
	w.Close()
	file, err := fs.Open(filepath.Join(testDir, segmentName(1)))
	if err != nil {
		f.Fatal(err)
	}
	defer file.Close()
	data := make([]byte, 4096)
	n, _ := file.Read(data)
	return data[:n]
}

func newSingleSegmentFS(t *testing.T, data []byte) *vfs.MemFS {
	fs := vfs.NewMem()
	if err := fs.MkdirAll(testDir, 0o755); err != nil {
		t.Fatal(err)
	}
	file, err := fs.Create(filepath.Join(testDir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	file.Write(data)
	file.Sync()
	file.Close()
	fs.SyncDir(testDir)
	return fs
}
