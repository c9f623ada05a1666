package wal

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/latch-io/latch/internal/vfs"
)

// TestCrashLoop saves random batches, crashes the simulated machine at a
// random filesystem call (inside Save, Release or Open), restarts, and
// checks that every acknowledged batch is there, in order, and nothing else:
// the one call in flight at the crash is present whole or absent. The
// zero-ahead variants also write zeros past each flush (zeroahead.go), so
// crashes land in those writes and fsyncs too.
func TestCrashLoop(t *testing.T) {
	tests := []struct {
		name      string
		torn      bool
		zeroAhead bool
	}{
		{name: "unsynced-dropped", torn: false},
		{name: "unsynced-sectors-torn", torn: true},
		{name: "zero-ahead-unsynced-dropped", torn: false, zeroAhead: true},
		{name: "zero-ahead-unsynced-sectors-torn", torn: true, zeroAhead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed := testSeed(t)
			random := rand.New(rand.NewSource(seed))
			runCrashLoop(t, random, tt.torn, tt.zeroAhead, crashLoopCalls(t))
		})
	}
}

// crashLoopCalls is the number of acknowledged Save calls per subtest:
// 1500 by default (fast under -race), 300 with -short, 6000 with WAL_LONG=1.
func crashLoopCalls(t *testing.T) int {
	switch {
	case longTests():
		return 6000
	case testing.Short():
		return 300
	}
	return 1500
}

func runCrashLoop(t *testing.T, random *rand.Rand, torn, zeroAhead bool, calls int) {
	const dir = "/data/wal"
	fs := vfs.NewMem()
	gen := newGenerator(random, 1+random.Intn(3))
	acknowledged, crashes := 0, 0
	for acknowledged < calls {
		fs.CrashAfter(random.Intn(60))
		options := quietOptions(int64(1024 + random.Intn(8192)))
		options.ZeroAhead = zeroAhead
		w, states, err := Open(fs, dir, options)
		if err == nil {
			if d := diffAll(gen.models, states); d != "" {
				t.Fatalf("after crash %d, reopened log differs from acknowledged batches: %s", crashes, d)
			}
			acknowledged += saveUntilCrash(t, w, gen, random)
			w.Close()
		} else if !errors.Is(err, vfs.ErrCrashed) {
			t.Fatalf("after crash %d: open: %v", crashes, err)
		}
		fs = crashClone(fs, random, torn)
		crashes++
		// Open on the crashed disk must succeed and return the models or
		// the models plus the call in flight; saveUntilCrash left both.
		options = quietOptions(4096)
		options.ZeroAhead = zeroAhead
		w, states, err = Open(fs, dir, options)
		if err != nil {
			t.Fatalf("after crash %d: open: %v", crashes, err)
		}
		if gen.inflight != nil {
			if d := diffAll(gen.models, states); d != "" {
				if d2 := diffAll(gen.inflight, states); d2 != "" {
					t.Fatalf("after crash %d: log is neither the acknowledged state (%s) nor that plus the call in flight (%s)", crashes, d, d2)
				}
			}
		} else if d := diffAll(gen.models, states); d != "" {
			t.Fatalf("after crash %d: log differs from acknowledged batches: %s", crashes, d)
		}
		gen.resetTo(states)
		gen.inflight = nil
		w.Close()
		fs = fs.CrashClone(vfs.CrashOptions{})
	}
	t.Logf("%d calls acknowledged over %d crashes", acknowledged, crashes)
}

func crashClone(fs *vfs.MemFS, random *rand.Rand, torn bool) *vfs.MemFS {
	return fs.CrashClone(vfs.CrashOptions{TornSectors: torn, Rand: random})
}

// saveUntilCrash saves and releases until the filesystem dies; it returns
// the number of acknowledged Save calls and leaves gen.inflight set to the
// state including the failed call.
func saveUntilCrash(t *testing.T, w *WAL, gen *generator, random *rand.Rand) int {
	saved := 0
	for {
		batches := gen.call()
		next := cloneModels(gen.models)
		for _, batch := range batches {
			next[batch.Group].apply(batch)
		}
		if err := w.Save(batches...); err != nil {
			if !errors.Is(err, vfs.ErrCrashed) {
				t.Fatalf("save: %v", err)
			}
			gen.inflight = next
			return saved
		}
		gen.models = next
		saved++
		if random.Intn(4) == 0 {
			group := uint64(1 + random.Intn(gen.groups))
			if err := w.Release(group, gen.models[group].snapshot.Index); err != nil {
				if !errors.Is(err, vfs.ErrCrashed) {
					t.Fatalf("release: %v", err)
				}
				return saved
			}
		}
	}
}
