package wal

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/vfs"
)

// writeLog records every WriteAt on the files a recordingFS created.
type writeLog struct {
	mu     sync.Mutex
	writes []fileWrite
}

type fileWrite struct {
	name       string
	start, end int64
	zeros      bool // every byte written was zero
}

type recordingFS struct {
	vfs.FS
	log *writeLog
}

type recordingFile struct {
	vfs.File
	log *writeLog
}

func (r recordingFS) Create(name string) (vfs.File, error) {
	file, err := r.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return recordingFile{File: file, log: r.log}, nil
}

func (r recordingFile) WriteAt(p []byte, off int64) (int, error) {
	r.log.mu.Lock()
	r.log.writes = append(r.log.writes, fileWrite{
		name: r.Name(), start: off, end: off + int64(len(p)),
		zeros: len(p) > 0 && bytes.Count(p, []byte{0}) == len(p),
	})
	r.log.mu.Unlock()
	return r.File.WriteAt(p, off)
}

func (l *writeLog) snapshot() []fileWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]fileWrite(nil), l.writes...)
}

func zeroAheadOptions(segmentSize int64) Options {
	options := quietOptions(segmentSize)
	options.ZeroAhead = true
	return options
}

// TestZeroAheadKeepsZerosPastTheOffset saves enough to cross several zero
// chunks and two segments, and checks what was written: zeros go only past
// every record written to the file before them (never over a record), the
// frontier stays within zeroLead plus one chunk of the write offset, each
// segment gets its zeros as it fills, and the log reads back whole.
func TestZeroAheadKeepsZerosPastTheOffset(t *testing.T) {
	const segmentSize = 3 * zeroChunk
	log := &writeLog{}
	fs := recordingFS{FS: vfs.NewMem(), log: log}
	w, _, err := Open(fs, testDir, zeroAheadOptions(segmentSize))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	payload := bytes.Repeat([]byte("x"), 8<<10)
	const calls = 1000 // 8 MiB of entries: about three segments
	for call := uint64(1); call <= calls; call++ {
		batch := entries(1, call, call, 1)
		batch.Entries[0].Data = payload
		mustSave(t, w, batch)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	zeroChunks := checkZeros(t, log.snapshot(), segmentSize)
	if len(zeroChunks) < 2 {
		t.Fatalf("zeros written to %d segments, want every segment that took records: %v", len(zeroChunks), zeroChunks)
	}
	_, states := mustOpen(t, fs.FS, segmentSize)
	if got := len(states[1].Entries); got != calls {
		t.Fatalf("%d entries read back, want %d", got, calls)
	}
	for i, entry := range states[1].Entries {
		if entry.Index != uint64(i+1) || !bytes.Equal(entry.Data, payload) {
			t.Fatalf("entry %d read back as index %d, %d bytes", i+1, entry.Index, len(entry.Data))
		}
	}
	t.Logf("zero chunks per segment: %v", zeroChunks)
}

// TestZeroAheadFailureIsSticky fails the write or the fsync of the first
// zeros: the Save they followed stays acknowledged and durable, and every
// later call returns the failure, as after a failed flush.
func TestZeroAheadFailureIsSticky(t *testing.T) {
	eio := errors.New("injected EIO")
	// Counted from the injection, after Open: the first Save writes and
	// fsyncs its flush, then the first zeros.
	tests := []struct {
		name  string
		fault vfs.Fault
	}{
		{name: "write", fault: vfs.Fault{Ops: vfs.OpWrite, Pattern: "*.wal", Skip: 1, Count: 1, Err: eio}},
		{name: "fsync", fault: vfs.Fault{Ops: vfs.OpSync, Pattern: "*.wal", Skip: 1, Count: 1, Err: eio}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			w, _, err := Open(fs, testDir, zeroAheadOptions(8<<20))
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			fs.Inject(tt.fault)
			mustSave(t, w, entries(1, 1, 3, 1))
			err = w.Save(entries(1, 4, 4, 1))
			if !errors.Is(err, eio) || !strings.Contains(err.Error(), "zeros") {
				t.Fatalf("save after the zeros failed: %v, want the injected error on the zeros", err)
			}
			if err := w.Save(entries(1, 4, 4, 1)); !errors.Is(err, eio) {
				t.Fatalf("a later save: %v, want the sticky failure", err)
			}
			w.Close()
			_, states := mustOpen(t, fs.CrashClone(vfs.CrashOptions{}), 8<<20)
			if got := len(states[1].Entries); got != 3 {
				t.Fatalf("%d entries after restart, want the 3 acknowledged", got)
			}
		})
	}
}

// TestZeroAheadWithoutSpaceStopsZeroing refuses the first zeros for want
// of space, as a filesystem that could not preallocate would: the WAL does
// not fail, writes no more zeros to that segment, and every Save is
// acknowledged and read back.
func TestZeroAheadWithoutSpaceStopsZeroing(t *testing.T) {
	mem := vfs.NewMem()
	log := &writeLog{}
	w, _, err := Open(recordingFS{FS: mem, log: log}, testDir, zeroAheadOptions(8<<20))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	// Counted from the injection: the first Save's flush, then its zeros.
	mem.Inject(vfs.Fault{Ops: vfs.OpWrite, Pattern: "*.wal", Skip: 1, Count: 1, Err: syscall.ENOSPC})
	for call := uint64(1); call <= 20; call++ {
		mustSave(t, w, entries(1, call, call, 1))
	}
	w.Close()
	zeros := 0
	for _, write := range log.snapshot() {
		if write.zeros {
			zeros++
		}
	}
	if zeros != 1 {
		t.Fatalf("%d writes of zeros, want only the refused one", zeros)
	}
	_, states := mustOpen(t, mem, 8<<20)
	if got := len(states[1].Entries); got != 20 {
		t.Fatalf("%d entries read back, want 20", got)
	}
}

// checkZeros checks the zeros among writes: each starts at or past the end
// of every record written to its file before it, ends within a lead and a
// chunk of them and within the segment, and every file that took records
// took zeros. It returns the number of zero writes per file.
func checkZeros(t *testing.T, writes []fileWrite, segmentSize int64) map[string]int {
	t.Helper()
	written := map[string]int64{} // the end of the records written to each file
	zeroChunks := map[string]int{}
	for _, write := range writes {
		if !write.zeros {
			written[write.name] = max(written[write.name], write.end)
			continue
		}
		if write.start < written[write.name] {
			t.Fatalf("%s: zeros at [%d, %d) over records written up to %d", write.name, write.start, write.end, written[write.name])
		}
		if write.end > written[write.name]+zeroLead+zeroChunk {
			t.Fatalf("%s: zeros up to %d, more than a lead past the records' end %d", write.name, write.end, written[write.name])
		}
		if write.end > segmentSize {
			t.Fatalf("%s: zeros up to %d, past the segment's preallocated %d", write.name, write.end, segmentSize)
		}
		zeroChunks[write.name]++
	}
	for name, end := range written {
		if zeroChunks[name] == 0 {
			t.Errorf("%s: records up to %d and no zeros ahead of them", name, end)
		}
	}
	return zeroChunks
}

// TestZeroAheadAfterAFlushPastTheFrontier: a flush larger than the lead,
// mid-segment, leaves the write offset past the zeroed frontier; the zeros
// after it start at the new offset, not at the old frontier.
func TestZeroAheadAfterAFlushPastTheFrontier(t *testing.T) {
	const segmentSize = 16 << 20
	log := &writeLog{}
	fs := recordingFS{FS: vfs.NewMem(), log: log}
	w, _, err := Open(fs, testDir, zeroAheadOptions(segmentSize))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	mustSave(t, w, entries(1, 1, 1, 1))
	mustSave(t, w, entries(1, 2, 2, 1))
	big := entries(1, 3, 5, 1)
	for i := range big.Entries {
		big.Entries[i].Data = bytes.Repeat([]byte("z"), 1<<20)
	}
	mustSave(t, w, big) // 3 MiB: past the 2 MiB frontier
	mustSave(t, w, entries(1, 6, 6, 1))
	mustSave(t, w, entries(1, 7, 7, 1))
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if chunks := checkZeros(t, log.snapshot(), segmentSize); chunks[filepath.Join(testDir, segmentName(1))] < 3 {
		t.Fatalf("zero writes %v, want zeros before and after the large flush", chunks)
	}
	_, states := mustOpen(t, fs.FS, segmentSize)
	if got := len(states[1].Entries); got != 7 {
		t.Fatalf("%d entries read back, want 7", got)
	}
}

// TestZerosDoNotHoldTheLeaderButHoldClose: while the zeros that follow a
// flush are being written, the Save that wrote the flush has returned, and
// Close waits for them before it closes the segment.
func TestZerosDoNotHoldTheLeaderButHoldClose(t *testing.T) {
	mem := vfs.NewMem()
	w, _, err := Open(mem, testDir, zeroAheadOptions(8<<20))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	hold := make(chan struct{})
	// Counted from the injection: the first Save's flush, then its zeros.
	mem.Inject(vfs.Fault{Ops: vfs.OpWrite, Pattern: "*.wal", Skip: 1, Count: 1, Hold: hold})
	writesBefore := mem.Calls(vfs.OpWrite)
	mustSave(t, w, entries(1, 1, 3, 1)) // returns with its zeros held
	if !waitUntil(10*time.Second, func() bool { return mem.Calls(vfs.OpWrite) >= writesBefore+2 }) {
		close(hold)
		t.Fatal("the zeros after the first flush were never written")
	}
	var released atomic.Bool // set just before the zeros may finish
	closed := make(chan error, 1)
	closedEarly := make(chan bool, 1)
	go func() {
		err := w.Close()
		closedEarly <- !released.Load()
		closed <- err
	}()
	// A Close that does not wait returns at once: give it the chance.
	select {
	case early := <-closedEarly:
		close(hold)
		t.Fatalf("Close returned (%v, before the zeros were let go: %v) while the zeros were being written", <-closed, early)
	case <-time.After(100 * time.Millisecond):
	}
	released.Store(true)
	close(hold)
	if <-closedEarly {
		t.Fatal("Close returned before the zeros were let go")
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	_, states := mustOpen(t, mem, 8<<20)
	if got := len(states[1].Entries); got != 3 {
		t.Fatalf("%d entries read back, want 3", got)
	}
}
