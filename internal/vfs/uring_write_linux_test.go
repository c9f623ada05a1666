//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// needRingWrites skips where the ring cannot take a write with its flush
// (no ring, or a kernel before 5.17): WriteAtSync is pwrite(2) and Sync
// there, which TestWriteAtSyncWithoutARing covers.
func needRingWrites(t testing.TB) {
	t.Helper()
	needRing(t)
	r, err := rings.get()
	if err != nil {
		t.Fatal(err)
	}
	defer rings.put(r)
	if r.params.features&uringFeatCQESkip == 0 {
		t.Skip("this kernel does not skip completions (Linux before 5.17): WriteAtSync uses pwrite(2)")
	}
}

func TestRingWritesWithTheirFlush(t *testing.T) {
	needRingWrites(t)
	f := createOSFile(t, OS())
	writes, flushes := rings.writes.Load(), rings.flushes.Load()
	var want []byte
	for i := range 20 {
		record := []byte{'r', 'e', 'c', byte('a' + i)}
		if err := f.(WriteSyncer).WriteAtSync(record, int64(len(want))); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		want = append(want, record...)
	}
	if got := rings.writes.Load() - writes; got != 20 {
		t.Fatalf("%d of 20 writes went through the ring with their flush", got)
	}
	if got := rings.flushes.Load() - flushes; got != 20 {
		t.Fatalf("%d flushes counted for 20 writes", got)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %q, want %q", got, want)
	}
}

// Without a ring (FlushSyscall), WriteAtSync is pwrite(2) and fsync(2).
func TestWriteAtSyncWithoutARing(t *testing.T) {
	f := createOSFile(t, OSWith(FlushSyscall))
	writes := rings.writes.Load()
	if err := f.(WriteSyncer).WriteAtSync([]byte("record"), 3); err != nil {
		t.Fatal(err)
	}
	if rings.writes.Load() != writes {
		t.Fatal("FlushSyscall wrote through the ring")
	}
	if got, err := os.ReadFile(f.Name()); err != nil || !bytes.Equal(got, []byte("\x00\x00\x00record")) {
		t.Fatalf("file holds %q (%v), want the record at 3", got, err)
	}
}

// limitFileSize sets RLIMIT_FSIZE to n bytes until the test ends: a write
// across it falls short, one at or past it fails with EFBIG (Go ignores
// the SIGXFSZ that comes with it). The limit is the whole process's: no
// test of this package runs in parallel with another.
func limitFileSize(t *testing.T, n uint64) {
	t.Helper()
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &saved); err != nil {
		t.Fatal(err)
	}
	limit := saved
	limit.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Skipf("cannot limit the file size: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &saved); err != nil {
			t.Errorf("restore RLIMIT_FSIZE: %v", err)
		}
	})
}

// A write that falls short cancels its fsync and posts the one completion,
// its own: the pair reports what it wrote and that nothing was flushed,
// and the ring is as good as new, its next pair posting only its fsync's.
// A write that fails reports the write's error.
func TestRingWriteThatFallsShort(t *testing.T) {
	needRingWrites(t)
	r, f := newRingAndFile(t)
	const limit = 4096
	limitFileSize(t, limit)
	record := bytes.Repeat([]byte("x"), 100)

	o, spent := r.writeSync(f.Fd(), record, limit-40)
	if spent || o.written != 40 || o.writeErr != nil || o.flush != notRun {
		t.Fatalf("write across the limit: %+v, spent %v; want 40 written, no error, the flush not run", o, spent)
	}
	o, spent = r.writeSync(f.Fd(), record, limit)
	if spent || o.written != 0 || !errors.Is(o.writeErr, syscall.EFBIG) {
		t.Fatalf("write at the limit: %+v, spent %v; want EFBIG", o, spent)
	}
	o, spent = r.writeSync(f.Fd(), record, 0)
	if spent || o.written != len(record) || o.writeErr != nil || o.flush != flushed || o.flushErr != nil {
		t.Fatalf("write within the limit after them: %+v, spent %v; want all written and flushed", o, spent)
	}
	if n := takeQueued(r); n != 0 {
		t.Fatalf("%d completions left in the queue: a skipped one was posted", n)
	}
}

// takeQueued takes the completions waiting in r's queue and says how many
// there were.
func takeQueued(r *syncRing) uint32 {
	n := uint32(0)
	for r.posted(0) {
		r.takeCompletion()
		n++
	}
	return n
}

// WriteAtSync finishes what the ring's write left (the rest of a short
// write, by pwrite(2)) and reports pwrite's error for it, naming the file.
func TestWriteAtSyncFinishesAShortWrite(t *testing.T) {
	needRingWrites(t)
	f := createOSFile(t, OS())
	const limit = 4096
	limitFileSize(t, limit)
	record := bytes.Repeat([]byte("y"), 100)
	err := f.(WriteSyncer).WriteAtSync(record, limit-40)
	if !errors.Is(err, syscall.EFBIG) || !strings.Contains(err.Error(), f.Name()) {
		t.Fatalf("write across the limit: %v, want EFBIG naming %s", err, f.Name())
	}
	got, rerr := os.ReadFile(f.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(got) != limit || !bytes.Equal(got[limit-40:], record[:40]) {
		t.Fatalf("file of %d bytes after the short write, want %d ending in the record's first 40", len(got), limit)
	}
}

// A pair whose completion cannot be read is of unknown outcome: the write
// fails naming the file, its ring is dropped, and the next write takes
// another ring.
func TestRingWithALostWriteIsDropped(t *testing.T) {
	needRingWrites(t)
	f := createOSFile(t, OS())
	pair := f.(WriteSyncer)
	failOnABrokenRing(t, f.Name(), func() error { return pair.WriteAtSync([]byte("record"), 0) })
	writes := rings.writes.Load()
	if err := pair.WriteAtSync([]byte("record"), 6); err != nil {
		t.Fatalf("next write: %v", err)
	}
	if rings.writes.Load() != writes+1 {
		t.Fatal("the next write did not go through a ring")
	}
}

// BenchmarkWriteAtSync: a 300-byte record (one WAL save of one small
// write) written and flushed into a zero-filled file, as the pair through
// the ring, and as pwrite(2) and then the ring's fsync; ns/op is a save's
// wall time. Run it with -cpu 1, as a member runs beside two others.
//
//	go test ./internal/vfs -run '^$' -bench WriteAtSync -cpu 1 -benchtime 3000x
func BenchmarkWriteAtSync(b *testing.B) {
	for _, how := range []string{"pair", "pwrite-then-flush"} {
		b.Run(how, func(b *testing.B) {
			needRingWrites(b)
			path := filepath.Join(b.TempDir(), "segment")
			prepareSegment(b, path, "zero-filled", int64(b.N+1)*300).Close()
			f, err := OS().OpenReadWrite(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			record := bytes.Repeat([]byte("r"), 300)
			b.ResetTimer()
			for i := range b.N {
				off := int64(i) * 300
				if how == "pair" {
					err = f.(WriteSyncer).WriteAtSync(record, off)
				} else if _, err = f.WriteAt(record, off); err == nil {
					err = f.Sync()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The pair reports its fsync's own error: a pipe takes the write and
// cannot be fsynced (EINVAL), through the pair as through fsync(2).
func TestRingWriteReportsTheFsyncError(t *testing.T) {
	needRingWrites(t)
	r, w := pipe(t)
	writes := rings.writes.Load()
	err := osFile{File: w, flush: FlushAuto}.WriteAtSync([]byte("record"), 0)
	if rings.writes.Load() != writes+1 {
		t.Fatal("the write did not go through the ring with its fsync")
	}
	var pathErr *os.PathError
	if !errors.As(err, &pathErr) || pathErr.Op != "sync" || pathErr.Path != w.Name() || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("pair on a pipe: %v, want the fsync's EINVAL (op \"sync\") naming %s", err, w.Name())
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "record" {
		t.Fatalf("pipe holds %q (%v), want the record", got, err)
	}
}
