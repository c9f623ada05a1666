//go:build linux

package vfs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// BenchmarkAppendSync measures one durable append as the WAL makes it: a
// write of 256 B or 4 KiB at the end of what was written, then a flush, in
// a segment prepared one of two ways: fallocated (what Preallocate does:
// the filesystem reserves blocks as unwritten extents, which the first
// flush after a write must convert) or zero-filled (every block written
// once and synced before the appends). Each is flushed with fsync or fdatasync, by
// one writer or three at once (three members on one disk). It reports the
// process's CPU per append (cpu-ns/append) beside the wall time. Run it
// where the data directories live, on a disk (a tmpfs measures nothing):
//
//	go test ./internal/vfs -run '^$' -bench AppendSync -benchtime 2000x -args -bench-dir /path
//
// docs/benchmarks.md has the figures and what they did (and did not do)
// inside latchd.
func BenchmarkAppendSync(b *testing.B) {
	for _, prep := range []string{"fallocated", "zero-filled"} {
		for _, flush := range []string{"fsync", "fdatasync"} {
			for _, size := range []int{256, 4096} {
				for _, writers := range []int{1, 3} {
					b.Run(fmt.Sprintf("%s/%s/size=%d/writers=%d", prep, flush, size, writers), func(b *testing.B) {
						benchmarkAppendSync(b, prep, flush, size, writers)
					})
				}
			}
		}
	}
}

func benchmarkAppendSync(b *testing.B, prep, flush string, size, writers int) {
	dir := *benchDirFlag
	if dir == "" {
		dir = b.TempDir()
	}
	files := make([]*os.File, writers)
	for w := range files {
		files[w] = prepareSegment(b, filepath.Join(dir, fmt.Sprintf("append-sync-%d", w)), prep, int64(b.N+1)*int64(size))
	}
	block := make([]byte, size)
	for i := range block {
		block[i] = byte(i)
	}
	before := processCPU(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < b.N; i++ {
				if _, err := f.WriteAt(block, int64(i)*int64(size)); err != nil {
					b.Error(err)
					return
				}
				if err := flushFile(f, flush); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-before)/float64(b.N*writers), "cpu-ns/append")
}

var benchDirFlag = flag.String("bench-dir", "", "BenchmarkAppendSync: the directory to write in (default: a temporary one)")

func prepareSegment(b *testing.B, path, prep string, size int64) *os.File {
	b.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close(); os.Remove(path) })
	if err := preallocate(f, size); err != nil { // as the WAL's segments are
		b.Fatalf("preallocate %s: %v", path, err)
	}
	if prep == "zero-filled" {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return f
}

func flushFile(f *os.File, flush string) error {
	if flush == "fdatasync" {
		return syscall.Fdatasync(int(f.Fd()))
	}
	return f.Sync()
}

// processCPU is the process's user and system time so far, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		b.Fatal(err)
	}
	return usage.Utime.Nano() + usage.Stime.Nano()
}

// TestWritesInPlace: a path that cannot be examined, and a filesystem
// that is neither ext2/3/4 nor XFS (procfs), are not known to write in
// place; the answer for the test's temporary directory matches its
// filesystem type.
func TestWritesInPlace(t *testing.T) {
	if WritesInPlace(filepath.Join(t.TempDir(), "absent", "dir")) {
		t.Error("a missing path is said to write in place")
	}
	if WritesInPlace("/proc") {
		t.Error("procfs is said to write in place")
	}
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := st.Type == ext4Magic || st.Type == xfsMagic
	if got := WritesInPlace(dir); got != want {
		t.Errorf("WritesInPlace(%s) = %v on filesystem type %#x, want %v", dir, got, st.Type, want)
	}
}
