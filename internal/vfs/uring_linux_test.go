//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// needRing skips where the kernel does not let this process use io_uring
// (a container's seccomp profile, the io_uring_disabled sysctl); there
// FlushAuto is fsync(2), which the rest of the suite covers.
func needRing(t testing.TB) {
	t.Helper()
	if ok, err := RingFlushes(); !ok {
		t.Skipf("io_uring unavailable here, FlushAuto uses fsync(2): %v", err)
	}
}

// newRingAndFile returns a ring of its own and a file in a temporary
// directory, both closed when the test ends.
func newRingAndFile(t *testing.T) (*syncRing, *os.File) {
	t.Helper()
	needRing(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r, err := newSyncRing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r, f
}

func TestRingFlushesOSFiles(t *testing.T) {
	needRing(t)
	dir := t.TempDir()
	f, err := OS().Create(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := rings.flushes.Load()
	for i := range 20 {
		if _, err := f.WriteAt([]byte("record"), int64(i*6)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if got := rings.flushes.Load() - before; got != 20 {
		t.Fatalf("%d of 20 syncs went through the ring", got)
	}

	plain, err := OSWith(FlushSyscall).Create(filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	before = rings.flushes.Load()
	if err := plain.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := rings.flushes.Load() - before; got != 0 {
		t.Fatalf("FlushSyscall went through the ring %d times", got)
	}
}

// A flush through the ring reports the fsync's own error: a pipe cannot be
// fsynced (EINVAL), through the ring as through fsync(2).
func TestRingFlushReportsTheFsyncError(t *testing.T) {
	needRing(t)
	_, w := pipe(t)
	want := w.Sync()
	if !errors.Is(want, syscall.EINVAL) {
		t.Fatalf("fsync(2) of a pipe: %v, want EINVAL", want)
	}
	before := rings.flushes.Load()
	got := osFile{File: w, flush: FlushAuto}.Sync()
	if rings.flushes.Load() == before {
		t.Fatal("the sync did not go through the ring")
	}
	if !errors.Is(got, syscall.EINVAL) || !strings.Contains(got.Error(), w.Name()) {
		t.Fatalf("ring flush of a pipe: %v, want EINVAL naming %s", got, w.Name())
	}
}

// pipe returns a pipe's two ends, closed when the test ends: a file whose
// writes succeed and whose fsync fails (EINVAL).
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestRingFlushOfAClosedFile(t *testing.T) {
	needRing(t)
	f, err := OS().Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := f.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("sync after close: %v, want os.ErrClosed", err)
	}
}

// Flushes in parallel each take a ring of their own, and the pool keeps no
// more rings than flushes were ever in flight together.
func TestRingFlushesInParallel(t *testing.T) {
	needRing(t)
	dir := t.TempDir()
	const goroutines, each = 8, 40
	files := make([]File, 4)
	for i := range files {
		f, err := OS().Create(filepath.Join(dir, "f"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	before := rings.flushes.Load()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := files[g%len(files)]
			for i := range each {
				if _, err := f.WriteAt([]byte{byte(i)}, int64(g)); err != nil {
					errs <- err
					return
				}
				if err := f.Sync(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := rings.flushes.Load() - before; got != goroutines*each {
		t.Fatalf("%d of %d syncs went through a ring", got, goroutines*each)
	}
	rings.mu.Lock()
	made, free := rings.made, len(rings.free)
	rings.mu.Unlock()
	if made > goroutines || free != made {
		t.Fatalf("%d rings made, %d back in the pool, for %d flushers", made, free, goroutines)
	}
}

// Where the kernel refuses io_uring, FlushAuto flushes with fsync(2) and
// RingFlushes says why.
func TestRefusedRingFallsBackToFsync(t *testing.T) {
	rings.mu.Lock()
	saved := rings.refused
	rings.refused = errors.New("io_uring_setup: operation not permitted")
	rings.mu.Unlock()
	defer func() {
		rings.mu.Lock()
		rings.refused = saved
		rings.mu.Unlock()
	}()
	if ok, err := RingFlushes(); ok || err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Fatalf("RingFlushes() = %v, %v; want false and the refusal", ok, err)
	}
	f, err := OS().Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := rings.flushes.Load()
	if err := f.Sync(); err != nil {
		t.Fatalf("sync without a ring: %v", err)
	}
	if rings.flushes.Load() != before {
		t.Fatal("a refused ring still flushed")
	}
}

// A flush whose completion cannot be read fails, and its ring, with an
// fsync of unknown outcome in it, is dropped rather than pooled: the next
// flush takes another ring and its own completion.
func TestRingWithALostFlushIsDropped(t *testing.T) {
	needRing(t)
	f := createOSFile(t, OS())
	failOnABrokenRing(t, f.Name(), f.Sync)
	before := rings.flushes.Load()
	if err := f.Sync(); err != nil {
		t.Fatalf("next sync: %v", err)
	}
	if rings.flushes.Load() != before+1 {
		t.Fatal("the next sync did not go through a ring")
	}
}

// createOSFile creates a file of fs in a temporary directory, closed when
// the test ends.
func createOSFile(t *testing.T, fs FS) File {
	t.Helper()
	f, err := fs.Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// failOnABrokenRing pools a ring whose completion cannot be read (its
// eventfd closed) and runs op on it: op must fail, naming the file and the
// failed wait, and the ring, with an operation of unknown outcome in it,
// must be dropped rather than pooled.
func failOnABrokenRing(t *testing.T, file string, op func() error) {
	t.Helper()
	broken, err := rings.get()
	if err != nil {
		t.Fatal(err)
	}
	broken.event.Close()
	rings.put(broken)
	if err := op(); err == nil || !strings.Contains(err.Error(), "waiting for io_uring") || !strings.Contains(err.Error(), file) {
		t.Fatalf("on a ring whose completion cannot be read: %v, want an error naming %s", err, file)
	}
	rings.mu.Lock()
	pooled := slices.Contains(rings.free, broken)
	rings.mu.Unlock()
	if pooled {
		t.Fatal("the ring went back to the pool")
	}
}

// A ring takes only its own flush's completion: one left over from an
// earlier flush (whose wait failed) is not taken for the next one's.
func TestRingRefusesAnotherFlushsCompletion(t *testing.T) {
	r, f := newRingAndFile(t)
	r.event.Close()
	if outcome, err := r.fsync(f.Fd()); outcome != lost || err == nil {
		t.Fatalf("first flush: %v, %v; want lost", outcome, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32(r.cqTail) == atomic.LoadUint32(r.cqHead) {
		if time.Now().After(deadline) {
			t.Fatal("the first flush never completed")
		}
		time.Sleep(time.Millisecond)
	}
	outcome, err := r.fsync(f.Fd())
	if outcome != lost || err == nil || !strings.Contains(err.Error(), "completion of flush 0 where flush 1") {
		t.Fatalf("second flush with the first's completion waiting: %v, %v; want lost, naming both", outcome, err)
	}
}

// A flush waits for its completion without reading the eventfd: the
// counter is left to grow, and every later signal must still wake the
// next flush's wait (the netpoller's watch is edge-triggered).
func TestRingFlushesWithTheEventCounterUnread(t *testing.T) {
	r, f := newRingAndFile(t)
	const flushes = 100
	done := make(chan error, 1)
	go func() {
		for i := range flushes {
			if _, err := f.Write([]byte("x")); err != nil {
				done <- err
				return
			}
			if outcome, err := r.fsync(f.Fd()); outcome != flushed || err != nil {
				done <- fmt.Errorf("flush %d: %v, %v", i, outcome, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a flush's wait was never woken")
	}
	var counter [8]byte
	if _, err := r.event.Read(counter[:]); err != nil {
		t.Fatalf("read the eventfd: %v", err)
	}
	if n := binary.NativeEndian.Uint64(counter[:]); n != flushes {
		t.Fatalf("eventfd counter %d after %d flushes: the waits read it", n, flushes)
	}
}
