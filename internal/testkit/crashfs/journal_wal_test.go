package crashfs_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/crashfs"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// errPowerCut fails the sync at which syncFailingFS's process "dies".
var errPowerCut = errors.New("test: the process dies at this sync")

// syncFailingFS is the operating system's FS with every File.Sync and
// SyncDir after the first allowed ones failing: the call's writes are in
// the page cache, never synced, as when a process is killed during fsync.
type syncFailingFS struct {
	vfs.FS
	allowed atomic.Int64 // syncs left before they fail
}

func (fs *syncFailingFS) sync() error {
	if fs.allowed.Add(-1) < 0 {
		return errPowerCut
	}
	return nil
}

func (fs *syncFailingFS) SyncDir(dir string) error {
	if err := fs.sync(); err != nil {
		return err
	}
	return fs.FS.SyncDir(dir)
}

func (fs *syncFailingFS) Create(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name))
}

func (fs *syncFailingFS) OpenReadWrite(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name))
}

func (fs *syncFailingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &syncFailingFile{File: f, fs: fs}, nil
}

type syncFailingFile struct {
	vfs.File
	fs *syncFailingFS
}

func (f *syncFailingFile) Sync() error {
	if err := f.fs.sync(); err != nil {
		return err
	}
	return f.File.Sync()
}

// TestJournalCutWAL runs the WAL on the OS's disk under a Journal, makes a
// sync fail at a random point (the process dies with that flush written but
// not synced), cuts the directory to the journal, and checks that a WAL
// opened on the cut directory holds every Save acknowledged before, through
// many rounds with segment rolls, snapshot markers and released segments.
// The zero-ahead variant also writes and syncs zeros past the records
// (wal.Options.ZeroAhead): the journal must not count them as durable
// contents, or no cut would drop the records written over them later.
func TestJournalCutWAL(t *testing.T) {
	for _, zeroAhead := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero-ahead=%v", zeroAhead), func(t *testing.T) { runJournalCutWAL(t, zeroAhead) })
	}
}

func runJournalCutWAL(t *testing.T, zeroAhead bool) {
	random := rand.New(rand.NewSource(testSeed(t)))
	base := t.TempDir()
	dataDir, journalPath := filepath.Join(base, "data"), filepath.Join(base, "data.journal")
	walDir := filepath.Join(dataDir, "wal")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	options := wal.Options{SegmentSize: 4096, Logger: quiet, ZeroAhead: zeroAhead}

	acked := map[uint64]string{} // index -> data of every acknowledged entry
	var snapshot uint64          // the highest acknowledged snapshot marker
	next := uint64(1)
	var dropped int64
	const rounds = 40
	for round := range rounds {
		inner := &syncFailingFS{FS: vfs.OS()}
		inner.allowed.Store(int64(random.Intn(30)))
		fs, err := vfs.NewJournal(inner, journalPath, dataDir)
		if err != nil {
			t.Fatal(err)
		}
		w, _, err := wal.Open(fs, walDir, options)
		if err == nil {
			snapshot = saveUntilFailure(t, w, random, acked, &next, snapshot)
			w.Close()
		} else if !errors.Is(err, errPowerCut) {
			t.Fatalf("round %d: open: %v", round, err)
		}
		report, err := crashfs.CutToJournal(journalPath, vfs.CrashOptions{TornSectors: random.Intn(2) == 0, Rand: random})
		if err != nil {
			t.Fatalf("round %d: cut: %v", round, err)
		}
		dropped += report.DroppedBytes
		t.Logf("round %d: %s %v", round, report, report.Removed)
		w, states, err := wal.Open(vfs.OS(), walDir, options)
		if err != nil {
			t.Fatalf("round %d: open after the cut (%s): %v", round, report, err)
		}
		state := states[1]
		if state == nil {
			state = &wal.GroupState{}
		}
		if err := checkRecovered(state, acked, snapshot); err != nil {
			t.Fatalf("round %d: after the cut (%s): %v", round, report, err)
		}
		next = state.Snapshot.Index + uint64(len(state.Entries)) + 1
		for index := range acked {
			if index >= next {
				delete(acked, index) // never acknowledged: the cut dropped it
			}
		}
		for _, entry := range state.Entries {
			acked[entry.Index] = string(entry.Data) // present now, so durable from here on
		}
		snapshot = max(snapshot, state.Snapshot.Index)
		w.Close()
	}
	t.Logf("%d rounds, %d entries acknowledged, %d unsynced bytes dropped by the cuts", rounds, next-1, dropped)
	if dropped == 0 {
		t.Fatalf("no cut dropped a byte in %d rounds", rounds)
	}
}

// saveUntilFailure saves batches of entries, now and then a snapshot marker
// and a release, until a Save fails; it records what was acknowledged and
// returns the highest acknowledged snapshot marker.
func saveUntilFailure(t *testing.T, w *wal.WAL, random *rand.Rand, acked map[uint64]string, next *uint64, snapshot uint64) uint64 {
	t.Helper()
	for {
		if random.Intn(8) == 0 && *next > 1 {
			marker := *next - 1 - uint64(random.Intn(int(min(*next-1, 5))))
			if err := w.Save(wal.Batch{Group: 1, Snapshot: &wal.SnapshotMarker{Index: marker, Term: 1}}); err != nil {
				return snapshot
			}
			snapshot = max(snapshot, marker)
			if err := w.Release(1, marker); err != nil {
				return snapshot
			}
			continue
		}
		batch := wal.Batch{Group: 1}
		for range 1 + random.Intn(4) {
			data := fmt.Sprintf("entry %d %x", *next, random.Uint64())
			data += string(make([]byte, random.Intn(700)))
			batch.Entries = append(batch.Entries, raftpb.Entry{Term: 1, Index: *next, Data: []byte(data)})
			*next++
		}
		if err := w.Save(batch); err != nil {
			if !errors.Is(err, errPowerCut) {
				t.Fatalf("save: %v", err)
			}
			return snapshot
		}
		for _, entry := range batch.Entries {
			acked[entry.Index] = string(entry.Data)
		}
	}
}

// checkRecovered says how state misses an acknowledged entry above the
// acknowledged snapshot, if it does.
func checkRecovered(state *wal.GroupState, acked map[uint64]string, snapshot uint64) error {
	if state.Snapshot.Index < snapshot {
		return fmt.Errorf("snapshot marker %d, below the acknowledged %d", state.Snapshot.Index, snapshot)
	}
	for index, data := range acked {
		if index <= state.Snapshot.Index {
			continue
		}
		position := index - state.Snapshot.Index - 1
		if position >= uint64(len(state.Entries)) {
			return fmt.Errorf("acknowledged entry %d missing (log has %d entries after snapshot %d)", index, len(state.Entries), state.Snapshot.Index)
		}
		if got := state.Entries[position]; got.Index != index || string(got.Data) != data {
			return fmt.Errorf("entry %d is %d %.20q, want the acknowledged %.20q", index, got.Index, got.Data, data)
		}
	}
	return nil
}
