package wal

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/vfs"
)

// countingFS counts fsyncs of files on the real disk.
type countingFS struct {
	vfs.FS
	syncs atomic.Int64
}

type countingFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (c countingFile) Sync() error { c.syncs.Add(1); return c.File.Sync() }

func (c *countingFS) Create(name string) (vfs.File, error) {
	file, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return countingFile{File: file, syncs: &c.syncs}, nil
}

func benchEntries(group, first uint64, count int, payload []byte) []raftpb.Entry {
	out := make([]raftpb.Entry, count)
	for i := range out {
		out[i] = raftpb.Entry{Index: first + uint64(i), Term: 1, Data: payload}
	}
	return out
}

// BenchmarkSave saves one batch of N entries of 256 B per op on the real
// disk (b.TempDir), one saver.
func BenchmarkSave(b *testing.B) {
	payload := make([]byte, 256)
	for _, count := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprintf("entries=%d", count), func(b *testing.B) {
			fs := &countingFS{FS: vfs.OS()}
			w, _, err := Open(fs, b.TempDir(), quietOptions(0))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			b.SetBytes(int64(count * len(payload)))
			next := uint64(1)
			fs.syncs.Store(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.Save(Batch{Group: 1, Entries: benchEntries(1, next, count, payload), HardState: raftpb.HardState{Term: 1, Commit: next}}); err != nil {
					b.Fatal(err)
				}
				next += uint64(count)
			}
			b.StopTimer()
			b.ReportMetric(float64(fs.syncs.Load())/float64(b.N), "fsyncs/op")
		})
	}
}

// BenchmarkConcurrentSavers has N goroutines each saving one 256 B entry
// per call (each its own group) on the real disk; an op is one Save call.
// Group commit shows as saves/s growing with savers and fsyncs/op below 1.
func BenchmarkConcurrentSavers(b *testing.B) {
	payload := make([]byte, 256)
	for _, savers := range []int{1, 256} {
		b.Run(fmt.Sprintf("savers=%d", savers), func(b *testing.B) {
			fs := &countingFS{FS: vfs.OS()}
			w, _, err := Open(fs, b.TempDir(), quietOptions(0))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var remaining atomic.Int64
			remaining.Store(int64(b.N))
			fs.syncs.Store(0)
			b.ResetTimer()
			start := time.Now()
			var wait sync.WaitGroup
			for saver := 1; saver <= savers; saver++ {
				wait.Add(1)
				go func() {
					defer wait.Done()
					for index := uint64(1); remaining.Add(-1) >= 0; index++ {
						if err := w.Save(Batch{Group: uint64(saver), Entries: benchEntries(uint64(saver), index, 1, payload)}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wait.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "saves/s")
			b.ReportMetric(float64(fs.syncs.Load())/float64(b.N), "fsyncs/op")
		})
	}
}

// TestRecoveryTime writes a log of WAL_RECOVERY_BYTES (default 1 GiB) of
// 256 B entries on the real disk and times Open. It runs only with
// WAL_RECOVERY_BENCH=1:
//
//	WAL_RECOVERY_BENCH=1 go test -run TestRecoveryTime -v ./internal/wal
func TestRecoveryTime(t *testing.T) {
	if os.Getenv("WAL_RECOVERY_BENCH") != "1" {
		t.Skip("set WAL_RECOVERY_BENCH=1 to run")
	}
	total := int64(1 << 30)
	if env := os.Getenv("WAL_RECOVERY_BYTES"); env != "" {
		fmt.Sscan(env, &total)
	}
	dir := t.TempDir()
	w, _, err := Open(vfs.OS(), dir, quietOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 256)
	const perSave = 4096
	next := uint64(1)
	writeStart := time.Now()
	for written := int64(0); written < total; written += perSave * int64(len(payload)) {
		if err := w.Save(Batch{Group: 1, Entries: benchEntries(1, next, perSave, payload), HardState: raftpb.HardState{Term: 1, Commit: next}}); err != nil {
			t.Fatal(err)
		}
		next += perSave
	}
	writeTime := time.Since(writeStart)
	segments := w.SegmentCount()
	w.Close()
	start := time.Now()
	w, states, err := Open(vfs.OS(), dir, quietOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	w.Close()
	if got := uint64(len(states[1].Entries)); got != next-1 {
		t.Fatalf("recovered %d entries, wrote %d", got, next-1)
	}
	t.Logf("wrote %d MiB (%d entries of 256 B, %d segments) in %v; Open recovered it in %v (%.0f MB/s)",
		total>>20, next-1, segments, writeTime.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(total)/1e6/elapsed.Seconds())
}

// BenchmarkEncodeRequest: encoding one save of N entries of 256 B (with a
// hard state) into its flush body, the CPU part of Save outside the write
// and the fsync.
func BenchmarkEncodeRequest(b *testing.B) {
	for _, entries := range []int{1, 20, 256} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			batch := Batch{Group: 1, HardState: raftpb.HardState{Term: 1, Commit: 1}, Entries: benchEntries(1, 1, entries, make([]byte, 256))}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeRequest([]Batch{batch}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
