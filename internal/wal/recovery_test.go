package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/vfs"
)

const testDir = "/wal"

func entries(group uint64, from, to, term uint64) Batch {
	batch := Batch{Group: group, HardState: raftpb.HardState{Term: term, Commit: from}}
	for index := from; index <= to; index++ {
		batch.Entries = append(batch.Entries, raftpb.Entry{Index: index, Term: term, Data: []byte(fmt.Sprintf("g%d-i%d-t%d", group, index, term))})
	}
	return batch
}

func mustOpen(t *testing.T, fs vfs.FS, segmentSize int64) (*WAL, map[uint64]*GroupState) {
	t.Helper()
	w, states, err := Open(fs, testDir, quietOptions(segmentSize))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w, states
}

func mustSave(t *testing.T, w *WAL, batches ...Batch) {
	t.Helper()
	if err := w.Save(batches...); err != nil {
		t.Fatalf("save: %v", err)
	}
}

// TestReplaySemantics checks raft's rules on replay, with a reopen between
// every step so each rule is read back from disk.
func TestReplaySemantics(t *testing.T) {
	marker := func(index, term uint64) Batch {
		return Batch{Group: 1, Snapshot: &SnapshotMarker{Index: index, Term: term}}
	}
	tests := []struct {
		name    string
		calls   [][]Batch
		want    SnapshotMarker
		indexes []uint64
		terms   []uint64
	}{
		{name: "append", calls: [][]Batch{{entries(1, 1, 3, 1)}, {entries(1, 4, 5, 1)}}, indexes: []uint64{1, 2, 3, 4, 5}, terms: []uint64{1, 1, 1, 1, 1}},
		{name: "conflict-truncates", calls: [][]Batch{{entries(1, 1, 5, 1)}, {entries(1, 3, 3, 2)}}, indexes: []uint64{1, 2, 3}, terms: []uint64{1, 1, 2}},
		{name: "marker-drops-prefix", calls: [][]Batch{{entries(1, 1, 5, 1)}, {marker(3, 1)}}, want: SnapshotMarker{Index: 3, Term: 1}, indexes: []uint64{4, 5}, terms: []uint64{1, 1}},
		{name: "marker-beyond-log", calls: [][]Batch{{entries(1, 1, 2, 1)}, {marker(9, 3)}, {entries(1, 10, 10, 3)}}, want: SnapshotMarker{Index: 9, Term: 3}, indexes: []uint64{10}, terms: []uint64{3}},
		{name: "older-marker-ignored", calls: [][]Batch{{entries(1, 1, 5, 1)}, {marker(4, 1)}, {marker(2, 1)}}, want: SnapshotMarker{Index: 4, Term: 1}, indexes: []uint64{5}, terms: []uint64{1}},
		{name: "installed-marker-drops-whole-log", calls: [][]Batch{{entries(1, 1, 5, 1)}, {{Group: 1, Snapshot: &SnapshotMarker{Index: 3, Term: 2, Installed: true}}}, {entries(1, 4, 4, 2)}}, want: SnapshotMarker{Index: 3, Term: 2}, indexes: []uint64{4}, terms: []uint64{2}},
		{name: "marker-and-entries-in-one-batch", calls: [][]Batch{{{Group: 1, Snapshot: &SnapshotMarker{Index: 5, Term: 2}, Entries: entries(1, 6, 7, 2).Entries}}}, want: SnapshotMarker{Index: 5, Term: 2}, indexes: []uint64{6, 7}, terms: []uint64{2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			for _, call := range tt.calls {
				w, _ := mustOpen(t, fs, 4096)
				mustSave(t, w, call...)
				w.Close()
			}
			w, states := mustOpen(t, fs, 4096)
			defer w.Close()
			state := states[1]
			var indexes, terms []uint64
			for _, entry := range state.Entries {
				indexes, terms = append(indexes, entry.Index), append(terms, entry.Term)
			}
			if state.Snapshot != tt.want || fmt.Sprint(indexes) != fmt.Sprint(tt.indexes) || fmt.Sprint(terms) != fmt.Sprint(tt.terms) {
				t.Fatalf("snapshot %+v indexes %v terms %v; want %+v %v %v", state.Snapshot, indexes, terms, tt.want, tt.indexes, tt.terms)
			}
		})
	}
}

func TestSaveRefusesGap(t *testing.T) {
	w, _ := mustOpen(t, vfs.NewMem(), 4096)
	defer w.Close()
	mustSave(t, w, entries(1, 1, 3, 1))
	if err := w.Save(entries(1, 5, 6, 1)); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("save with a gap: %v, want ErrInvalidBatch", err)
	}
	mustSave(t, w, entries(1, 4, 4, 1)) // the WAL is still usable
}

// segmentFiles returns the WAL's segment paths, oldest first.
func segmentFiles(t *testing.T, fs vfs.FS) []string {
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range names {
		if _, ok := parseSegmentName(name); ok {
			paths = append(paths, filepath.Join(testDir, name))
		}
	}
	return paths
}

func readRaw(t *testing.T, fs vfs.FS, name string) []byte {
	file, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeRaw(t *testing.T, fs vfs.FS, name string, data []byte) {
	file, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
}

// buildLog writes calls of 3 entries each across several small segments,
// closes, and returns the filesystem and the end of written data in the
// last segment that holds records.
func buildLog(t *testing.T, calls int) *vfs.MemFS {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 3000)
	for call := 0; call < calls; call++ {
		first := uint64(call*3 + 1)
		batch := entries(1, first, first+2, 1)
		for i := range batch.Entries {
			batch.Entries[i].Data = append(batch.Entries[i].Data, bytes.Repeat([]byte{byte(call + 1)}, 300)...)
		}
		mustSave(t, w, batch)
	}
	w.Close()
	return fs
}

// lastDataSegment is the newest segment with flushes (Open leaves an empty
// newest one), and the end of its records.
func lastDataSegment(t *testing.T, fs vfs.FS) (string, int) {
	paths := segmentFiles(t, fs)
	for i := len(paths) - 1; i >= 0; i-- {
		data := readRaw(t, fs, paths[i])
		header, err := decodeRecord(data, 0)
		if err != nil {
			t.Fatal(err)
		}
		end := header.size
		for {
			record, err := decodeRecord(data, end)
			if err != nil {
				break
			}
			end += record.size
		}
		if end > header.size {
			// Drop the empty segments after it, so it is the last.
			for _, later := range paths[i+1:] {
				fs.Remove(later)
			}
			return paths[i], end
		}
	}
	t.Fatal("no segment with data")
	return "", 0
}

// TestTornTailRepaired damages the last flush the way a crash can and
// checks Open drops exactly that flush and the log stays writable.
func TestTornTailRepaired(t *testing.T) {
	tests := []struct {
		name   string
		damage func(data []byte, flushStart, end int) []byte
	}{
		{name: "truncated-mid-record", damage: func(d []byte, s, e int) []byte { return d[:e-7] }},
		{name: "truncated-mid-header", damage: func(d []byte, s, e int) []byte { return d[:s+5] }},
		{name: "zero-filled-tail", damage: func(d []byte, s, e int) []byte { clear(d[s:e]); return d }},
		{name: "half-written-last-sector-zero", damage: func(d []byte, s, e int) []byte {
			clear(d[max(s, (e-1)/vfs.SectorSize*vfs.SectorSize):e])
			return d
		}},
		{name: "first-sector-lost-rest-written", damage: func(d []byte, s, e int) []byte {
			clear(d[s:min(e, (s/vfs.SectorSize+1)*vfs.SectorSize)])
			return d
		}},
		{name: "middle-sector-lost", damage: func(d []byte, s, e int) []byte {
			if middle := (s/vfs.SectorSize + 1) * vfs.SectorSize; middle < e {
				clear(d[middle:min(e, middle+vfs.SectorSize)])
			} else {
				clear(d[s:e])
			}
			return d
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := buildLog(t, 12)
			name, end := lastDataSegment(t, fs)
			data := readRaw(t, fs, name)
			flushStart := lastFlushStart(t, data)
			writeRaw(t, fs, name, tt.damage(bytes.Clone(data), flushStart, end))
			w, states := mustOpen(t, fs, 2048)
			entries0 := states[1].Entries
			if len(entries0) != 33 || entries0[len(entries0)-1].Index != 33 {
				t.Fatalf("after repair %d entries (last %d), want the 33 of the first 11 calls", len(entries0), entries0[len(entries0)-1].Index)
			}
			mustSave(t, w, entries(1, 34, 36, 2))
			w.Close()
			_, states = mustOpen(t, fs, 2048)
			if got := len(states[1].Entries); got != 36 {
				t.Fatalf("after a save on the repaired log, %d entries, want 36", got)
			}
		})
	}
}

func lastFlushStart(t *testing.T, data []byte) int {
	header, _ := decodeRecord(data, 0)
	offset, last := header.size, -1
	for {
		record, err := decodeRecord(data, offset)
		if err != nil {
			return last
		}
		if record.kind != recordFlush {
			t.Fatalf("record of type %d at %d, want a flush", record.kind, offset)
		}
		length, _ := decodeFlush(record.payload)
		last, offset = offset, offset+record.size+length
	}
}

// TestBitFlipRefused flips a bit at every offset of every written record of
// a log (the last flush of the last segment included): Open must refuse and
// name the file and an offset at or before the flip, never silently drop
// or accept data.
func TestBitFlipRefused(t *testing.T) {
	fs := buildLog(t, 12)
	paths := segmentFiles(t, fs)
	step := 3 // every offset with WAL_LONG=1
	if longTests() {
		step = 1
	}
	flips := 0
	for _, name := range paths {
		original := readRaw(t, fs, name)
		end := walkSegment(original).end
		for offset := 0; offset < end; offset += step {
			damaged := bytes.Clone(original)
			damaged[offset] ^= 1 << (offset % 8)
			writeRaw(t, fs, name, damaged)
			clone := fs.CrashClone(vfs.CrashOptions{})
			_, _, err := Open(clone, testDir, quietOptions(2048))
			var corrupt *CorruptError
			if !errors.As(err, &corrupt) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip at %s:%d: open returned %v, want a CorruptError", name, offset, err)
			}
			if corrupt.File != name || corrupt.Offset > int64(offset) {
				t.Fatalf("flip at %s:%d: error names %s:%d", name, offset, corrupt.File, corrupt.Offset)
			}
			flips++
		}
		writeRaw(t, fs, name, original)
	}
	t.Logf("%d bit flips over %d segments all refused", flips, len(paths))
}

func TestMissingSegmentDetected(t *testing.T) {
	tests := []struct {
		name   string
		remove func(paths []string) string
	}{
		{name: "middle", remove: func(paths []string) string { return paths[len(paths)/2] }},
		{name: "oldest", remove: func(paths []string) string { return paths[0] }},
		{name: "second-oldest", remove: func(paths []string) string { return paths[1] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := buildLog(t, 12)
			paths := segmentFiles(t, fs)
			if len(paths) < 4 {
				t.Fatalf("only %d segments", len(paths))
			}
			if err := fs.Remove(tt.remove(paths)); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(fs, testDir, quietOptions(2048))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open without %s: %v, want ErrCorrupt", tt.name, err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestReleaseDeletesCoveredSegments checks that released segments go and
// the log still reads back from its new first segment.
func TestReleaseDeletesCoveredSegments(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 2048)
	for call := uint64(0); call < 20; call++ {
		mustSave(t, w, entries(1, call*3+1, call*3+3, 1), entries(2, call+1, call+1, 1))
	}
	mustSave(t, w, Batch{Group: 1, Snapshot: &SnapshotMarker{Index: 45, Term: 1}})
	before := w.SegmentCount()
	if err := w.Release(1, 45); err != nil {
		t.Fatal(err)
	}
	if w.SegmentCount() != before {
		t.Fatalf("segments deleted though group 2 released nothing")
	}
	mustSave(t, w, Batch{Group: 2, Snapshot: &SnapshotMarker{Index: 15, Term: 1}})
	if err := w.Release(2, 15); err != nil {
		t.Fatal(err)
	}
	after := w.SegmentCount()
	if after >= before {
		t.Fatalf("%d segments before release, %d after", before, after)
	}
	w.Close()
	_, states := mustOpen(t, fs, 2048)
	if first := states[1].Entries[0].Index; states[1].Snapshot.Index != 45 || first != 46 || len(states[1].Entries) != 15 {
		t.Fatalf("group 1 after release: snapshot %d, first %d, %d entries", states[1].Snapshot.Index, first, len(states[1].Entries))
	}
	if states[2].Snapshot.Index != 15 || len(states[2].Entries) != 5 {
		t.Fatalf("group 2 after release: snapshot %d, %d entries", states[2].Snapshot.Index, len(states[2].Entries))
	}
	t.Logf("%d segments before release, %d after", before, after)
}

// TestInjectedErrorsSticky fails a write or an fsync once: that Save and
// every later one return the error, and every acknowledged Save survives.
func TestInjectedErrorsSticky(t *testing.T) {
	eio := errors.New("injected EIO")
	tests := []struct {
		name  string
		fault vfs.Fault
	}{
		{name: "fsync", fault: vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Skip: 5, Count: 1, Err: eio}},
		{name: "write", fault: vfs.Fault{Ops: vfs.OpWrite, Pattern: "*.wal", Skip: 5, Count: 1, Err: eio}},
		{name: "partial-write", fault: vfs.Fault{Ops: vfs.OpWrite, Pattern: "*.wal", Skip: 5, Count: 1, Err: eio, PartialWrite: true}},
		{name: "dir-fsync-on-roll", fault: vfs.Fault{Ops: vfs.OpSyncDir, Skip: 2, Count: 1, Err: eio}},
		{name: "create-on-roll", fault: vfs.Fault{Ops: vfs.OpCreate, Skip: 2, Count: 1, Err: eio}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			w, _ := mustOpen(t, fs, 1024)
			fs.Inject(tt.fault)
			acknowledged := uint64(0)
			var first error
			for call := uint64(0); call < 40; call++ {
				err := w.Save(entries(1, call*2+1, call*2+2, 1))
				if err == nil && first == nil {
					acknowledged = call*2 + 2
					continue
				}
				if err == nil {
					t.Fatalf("save %d succeeded after the failure %v", call, first)
				}
				if !errors.Is(err, eio) {
					t.Fatalf("save %d: %v, want the injected error", call, err)
				}
				if first == nil {
					first = err
				}
			}
			if first == nil {
				t.Fatal("the fault never fired")
			}
			if err := w.Release(1, 1); !errors.Is(err, eio) {
				t.Fatalf("release after failure: %v", err)
			}
			w.Close()
			_, states := mustOpen(t, fs.CrashClone(vfs.CrashOptions{}), 1024)
			if got := uint64(len(states[1].Entries)); got < acknowledged {
				t.Fatalf("%d entries after restart, %d were acknowledged", got, acknowledged)
			}
		})
	}
}

// TestConcurrentSaves saves from many goroutines, each its own group, and
// checks every acknowledged entry is read back in order.
func TestConcurrentSaves(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 16<<10)
	const savers, calls = 16, 40
	saveConcurrently(t, w, savers, calls)
	w.Close()
	_, states := mustOpen(t, fs.CrashClone(vfs.CrashOptions{}), 16<<10)
	checkEntriesPerGroup(t, states, savers, calls)
	if syncs := fs.Calls(vfs.OpSync); syncs >= savers*calls {
		t.Logf("note: %d fsyncs for %d saves (no batching happened this run)", syncs, savers*calls)
	}
}

// TestConcurrentSavesOnDisk is TestConcurrentSaves on the operating
// system's files, whose saves write and flush in one submission where the
// kernel allows it (vfs.WriteSyncer), across segment rolls: every
// acknowledged entry is read back.
func TestConcurrentSavesOnDisk(t *testing.T) {
	dir := t.TempDir()
	w, _, err := Open(vfs.OS(), dir, quietOptions(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	const savers, calls = 8, 40
	saveConcurrently(t, w, savers, calls)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if segments, _ := filepath.Glob(filepath.Join(dir, "*.wal")); len(segments) < 2 {
		t.Fatalf("%d segments: the saves never rolled to a new one", len(segments))
	}
	reopened, states, err := Open(vfs.OS(), dir, quietOptions(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	checkEntriesPerGroup(t, states, savers, calls)
}

// saveConcurrently saves calls one-entry batches from each of savers
// goroutines, goroutine g saving group g's entries 1 to calls in order.
func saveConcurrently(t *testing.T, w *WAL, savers, calls uint64) {
	t.Helper()
	var wait sync.WaitGroup
	errs := make(chan error, savers)
	for group := uint64(1); group <= savers; group++ {
		wait.Add(1)
		go func() {
			defer wait.Done()
			for call := uint64(0); call < calls; call++ {
				if err := w.Save(entries(group, call+1, call+1, 1)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wait.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkEntriesPerGroup checks that groups 1 to groups each recovered calls
// entries.
func checkEntriesPerGroup(t *testing.T, states map[uint64]*GroupState, groups, calls uint64) {
	t.Helper()
	for group := uint64(1); group <= groups; group++ {
		if got := uint64(len(states[group].Entries)); got != calls {
			t.Fatalf("group %d: %d entries, want %d", group, got, calls)
		}
	}
}

func TestOpenLocksDirectory(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 4096)
	if _, _, err := Open(fs, testDir, quietOptions(4096)); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	w.Close()
	if err := w.Save(entries(1, 1, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("save after close: %v", err)
	}
}

// TestEmptyBatchLeavesNoCheckpoint saves a call in which one group's batch
// holds no record (no entry, no marker, an empty hard state) next to
// another group's entries, then saves until the log rolls to a new segment
// and reopens: the new segment must not checkpoint a group the log never
// wrote a record of, or Open finds a checkpoint the preceding segments
// cannot produce and refuses the log as corrupt.
func TestEmptyBatchLeavesNoCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	w, _ := mustOpen(t, fs, 1024)
	mustSave(t, w, Batch{Group: 1}, entries(2, 1, 1, 1))
	index := uint64(1)
	for w.SegmentCount() < 2 {
		index++
		mustSave(t, w, entries(2, index, index, 1))
	}
	w.Close()
	files := segmentFiles(t, fs)
	data := readRaw(t, fs, files[1])
	record, err := decodeRecord(data, 0)
	if err != nil {
		t.Fatalf("header of %s: %v", files[1], err)
	}
	header, err := decodeSegmentHeader(record.payload)
	if err != nil {
		t.Fatalf("header of %s: %v", files[1], err)
	}
	for _, checkpoint := range header.checkpoints {
		if checkpoint.group == 1 {
			t.Fatalf("%s checkpoints group 1, of which no record was written: %+v", files[1], checkpoint)
		}
	}
	w, states := mustOpen(t, fs, 1024)
	defer w.Close()
	if _, ok := states[1]; ok {
		t.Fatalf("group 1 recovered, but no record of it was written")
	}
	if got := uint64(len(states[2].Entries)); got != index {
		t.Fatalf("group 2 has %d entries, want %d", got, index)
	}
}

// TestEmptyCheckpointOfUnknownGroupAccepted opens a log whose later segment
// checkpoints a group with nothing in it (no snapshot, no entries, an empty
// hard state) that no earlier record names, as a writer that created a
// group for an empty batch left it: such a checkpoint agrees with an
// unwritten group, so Open accepts it and recovers nothing for that group.
// A non-empty checkpoint of an unknown group is still refused.
func TestEmptyCheckpointOfUnknownGroupAccepted(t *testing.T) {
	for _, tt := range []struct {
		name       string
		checkpoint groupCheckpoint
		wantErr    bool
	}{
		{name: "empty", checkpoint: groupCheckpoint{group: 7}},
		{name: "with-entries", checkpoint: groupCheckpoint{group: 7, lastIndex: 4}, wantErr: true},
		{name: "with-hard-state", checkpoint: groupCheckpoint{group: 7, hardState: raftpb.HardState{Term: 2}}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			w, _ := mustOpen(t, fs, 4096)
			mustSave(t, w, entries(2, 1, 3, 1))
			w.Close()
			w, _ = mustOpen(t, fs, 4096)
			w.Close()
			files := segmentFiles(t, fs)
			last := files[len(files)-1]
			sequence, _ := parseSegmentName(filepath.Base(last))
			header := segmentHeader{sequence: sequence, checkpoints: []groupCheckpoint{
				{group: 2, lastIndex: 3, hardState: raftpb.HardState{Term: 1, Commit: 1}}, tt.checkpoint}}
			writeRaw(t, fs, last, appendRecord(nil, recordSegmentHeader, encodeSegmentHeader(header)))
			w, states, err := Open(fs, testDir, quietOptions(4096))
			if tt.wantErr {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("open: %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer w.Close()
			if _, ok := states[7]; ok {
				t.Fatalf("group 7 recovered from an empty checkpoint")
			}
			if got := len(states[2].Entries); got != 3 {
				t.Fatalf("group 2 has %d entries, want 3", got)
			}
		})
	}
}
