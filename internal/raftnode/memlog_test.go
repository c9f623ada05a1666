package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/testseed"
)

// memLogEntries makes n entries from index first in term, each with data
// naming its index and term (so a replaced entry differs from the one it
// replaces) and a length that varies, so that size limits cut anywhere.
func memLogEntries(first, n, term uint64) []raftpb.Entry {
	ents := make([]raftpb.Entry, n)
	for i := range ents {
		index := first + uint64(i)
		data := fmt.Appendf(nil, "%d@%d:", index, term)
		data = append(data, make([]byte, index%37)...)
		ents[i] = raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: data}
	}
	return ents
}

// handedOut is a slice Entries returned, with a copy of what it held then.
type handedOut struct {
	got  []raftpb.Entry
	want []raftpb.Entry
}

// TestMemLogAnswersAsMemoryStorage runs random appends (replacing tails
// too), compactions, snapshots taken and snapshots installed against memLog
// and raft.MemoryStorage side by side, over several chunks, and checks that
// every question raft asks gets the same answer from both, and that no
// slice memLog handed out ever changes afterwards.
func TestMemLogAnswersAsMemoryStorage(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Pick(t, *seedFlag, "RAFTNODE_SEED"), 2))
	got, want := newMemLog(), raft.NewMemoryStorage()
	var kept []handedOut
	term := uint64(1)
	for step := 0; step < 20_000; step++ {
		first, _ := want.FirstIndex()
		last, _ := want.LastIndex()
		switch op := rng.IntN(100); {
		case op < 55: // append after the last entry, or over a tail (from before the first entry, at times)
			at := last + 1
			if last > 0 && rng.IntN(4) == 0 {
				lo := first - min(first-1, 40)
				at = lo + rng.Uint64N(last+2-lo)
				term++
			}
			n := 1 + rng.Uint64N(24)
			if rng.IntN(8) == 0 {
				n = 1 + rng.Uint64N(3*memLogChunk/2)
			}
			ents := memLogEntries(at, n, term)
			mustSame(t, step, "Append", got.Append(ents), want.Append(ents))
		case op < 62 && last >= first: // compact
			i := first + rng.Uint64N(last-first+1)
			mustSame(t, step, "Compact", got.Compact(i), want.Compact(i))
		case op < 67: // take a snapshot at a kept index
			if last < first {
				continue
			}
			i := first - 1 + rng.Uint64N(last-first+2)
			cs := &raftpb.ConfState{Voters: []uint64{1, 2, rng.Uint64N(9) + 3}}
			gs, gerr := got.CreateSnapshot(i, cs, nil)
			ws, werr := want.CreateSnapshot(i, cs, nil)
			mustSame(t, step, "CreateSnapshot", gerr, werr)
			if !reflect.DeepEqual(gs, ws) {
				t.Fatalf("step %d: CreateSnapshot(%d) = %v, MemoryStorage says %v", step, i, gs.Metadata, ws.Metadata)
			}
		case op < 69: // install a leader's snapshot past (or inside) the log
			index := last + rng.Uint64N(2*memLogChunk) - rng.Uint64N(min(last, memLogChunk)+1)
			term++
			s := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: index, Term: term,
				ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
			mustSame(t, step, "ApplySnapshot", got.ApplySnapshot(s), want.ApplySnapshot(s))
		default: // set the hard state
			hs := raftpb.HardState{Term: term, Vote: rng.Uint64N(3) + 1, Commit: last}
			mustSame(t, step, "SetHardState", got.SetHardState(hs), want.SetHardState(hs))
		}
		kept = append(kept, compareMemLog(t, step, rng, got, want)...)
		if len(kept) > 60 {
			kept = kept[len(kept)-30:]
		}
		for _, h := range kept {
			if !entriesEqual(h.got, h.want) {
				t.Fatalf("step %d: a slice Entries handed out changed afterwards", step)
			}
		}
	}
}

// compareMemLog asks both logs what raft asks and fails on any difference;
// it returns copies of some of memLog's Entries answers, to be checked for
// changes later.
func compareMemLog(t *testing.T, step int, rng *rand.Rand, got *memLog, want *raft.MemoryStorage) []handedOut {
	t.Helper()
	gf, _ := got.FirstIndex()
	wf, _ := want.FirstIndex()
	gl, _ := got.LastIndex()
	wl, _ := want.LastIndex()
	if gf != wf || gl != wl {
		t.Fatalf("step %d: first, last = %d, %d; MemoryStorage says %d, %d", step, gf, gl, wf, wl)
	}
	ghs, gcs, _ := got.InitialState()
	whs, wcs, _ := want.InitialState()
	if ghs != whs || !reflect.DeepEqual(gcs, wcs) {
		t.Fatalf("step %d: InitialState = %v %v; MemoryStorage says %v %v", step, ghs, gcs, whs, wcs)
	}
	gs, _ := got.Snapshot()
	ws, _ := want.Snapshot()
	if !reflect.DeepEqual(gs, ws) {
		t.Fatalf("step %d: Snapshot = %v; MemoryStorage says %v", step, gs.Metadata, ws.Metadata)
	}
	terms := []uint64{wf - 1, wf, wl, wl + 1, wf + rng.Uint64N(wl-wf+2)}
	if wf >= 2 {
		terms = append(terms, wf-2) // compacted
	}
	for _, i := range terms {
		gt, gerr := got.Term(i)
		wt, werr := want.Term(i)
		if gt != wt || !errors.Is(gerr, werr) {
			t.Fatalf("step %d: Term(%d) = %d, %v; MemoryStorage says %d, %v", step, i, gt, gerr, wt, werr)
		}
	}
	edges := [][2]uint64{{wf, wf}} // empty, on an empty log too
	if wf >= 2 {
		edges = append(edges, [2]uint64{wf - 1, wl + 1}) // from a compacted index
	}
	for _, r := range edges {
		ge, gerr := got.Entries(r[0], r[1], math.MaxUint64)
		we, werr := want.Entries(r[0], r[1], math.MaxUint64)
		if !errors.Is(gerr, werr) || !entriesEqual(ge, we) {
			t.Fatalf("step %d: Entries(%d, %d) = %d entries, %v; MemoryStorage says %d, %v", step, r[0], r[1], len(ge), gerr, len(we), werr)
		}
	}
	if wl < wf {
		return nil
	}
	var out []handedOut
	for range 3 {
		lo := wf + rng.Uint64N(wl-wf+1)
		hi := lo + 1 + rng.Uint64N(wl-lo+1)
		maxSize := uint64(math.MaxUint64)
		if rng.IntN(2) == 0 {
			maxSize = rng.Uint64N(4000)
		}
		ge, gerr := got.Entries(lo, hi, maxSize)
		we, werr := want.Entries(lo, hi, maxSize)
		if !errors.Is(gerr, werr) || !entriesEqual(ge, we) {
			t.Fatalf("step %d: Entries(%d, %d, %d) = %d entries, %v; MemoryStorage says %d, %v",
				step, lo, hi, maxSize, len(ge), gerr, len(we), werr)
		}
		if len(ge) > 0 && cap(ge) != len(ge) {
			t.Fatalf("step %d: Entries(%d, %d) has room to append into: len %d cap %d", step, lo, hi, len(ge), cap(ge))
		}
		out = append(out, handedOut{got: ge, want: slices.Clone(we)})
	}
	return out
}

func entriesEqual(a, b []raftpb.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y raftpb.Entry) bool {
		return x.Index == y.Index && x.Term == y.Term && x.Type == y.Type && bytes.Equal(x.Data, y.Data)
	})
}

func mustSame(t *testing.T, step int, call string, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
		t.Fatalf("step %d: %s = %v; MemoryStorage says %v", step, call, got, want)
	}
}

// TestMemLogChunkEdges runs, for compaction points, snapshots and tail
// replacements on and around a chunk's edges, each with entries kept before
// it and without, the same calls on memLog and MemoryStorage, then appends
// across the next edge and compares every answer; slices handed out before
// must not change.
func TestMemLogChunkEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7)) // only picks the ranges compareMemLog asks about
	for _, x := range []uint64{memLogChunk - 2, memLogChunk - 1, memLogChunk, 2*memLogChunk - 1} {
		for _, kind := range []string{"compact", "snapshot", "replace-tail", "replace-all"} {
			t.Run(fmt.Sprintf("%s-%d", kind, x), func(t *testing.T) {
				got, want := newMemLog(), raft.NewMemoryStorage()
				ents := memLogEntries(1, 2*memLogChunk+10, 1)
				mustSame(t, 0, "Append", got.Append(ents), want.Append(ents))
				kept := compareMemLog(t, 0, rng, got, want)
				for lo := uint64(1); lo <= uint64(len(ents)); lo = (lo/(memLogChunk/4) + 1) * (memLogChunk / 4) {
					// Every entry handed out, in windows that stay within a chunk.
					hi := min((lo/(memLogChunk/4)+1)*(memLogChunk/4), uint64(len(ents))+1)
					ge, err := got.Entries(lo, hi, math.MaxUint64)
					if err != nil {
						t.Fatal(err)
					}
					kept = append(kept, handedOut{got: ge, want: slices.Clone(ents[lo-1 : hi-1])})
				}
				switch kind {
				case "compact":
					mustSame(t, 1, "Compact", got.Compact(x), want.Compact(x))
				case "snapshot":
					s := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: x, Term: 2}}
					mustSame(t, 1, "ApplySnapshot", got.ApplySnapshot(s), want.ApplySnapshot(s))
				case "replace-tail": // entries from x+1 on are replaced
					tail := memLogEntries(x+1, 3, 2)
					mustSame(t, 1, "Append", got.Append(tail), want.Append(tail))
				case "replace-all": // compacted to x-1, then every entry kept is replaced
					mustSame(t, 1, "Compact", got.Compact(x-1), want.Compact(x-1))
					tail := memLogEntries(x, 3, 2)
					mustSame(t, 1, "Append", got.Append(tail), want.Append(tail))
				}
				kept = append(kept, compareMemLog(t, 2, rng, got, want)...)
				last, _ := want.LastIndex()
				more := memLogEntries(last+1, memLogChunk+3, 3) // across the next edge
				mustSame(t, 3, "Append", got.Append(more), want.Append(more))
				compareMemLog(t, 4, rng, got, want)
				for _, h := range kept {
					if !entriesEqual(h.got, h.want) {
						t.Fatal("a slice Entries handed out changed afterwards")
					}
				}
			})
		}
	}
}

// TestMemLogRefusesAGap: entries that would leave a hole after the last
// kept one are refused (MemoryStorage panics), and the log is unchanged.
func TestMemLogRefusesAGap(t *testing.T) {
	l := newMemLog()
	if err := l.Append(memLogEntries(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(memLogEntries(12, 3, 1)); !errors.Is(err, errLogGap) {
		t.Fatalf("Append after a gap = %v, want errLogGap", err)
	}
	if last, _ := l.LastIndex(); last != 10 {
		t.Fatalf("last index after a refused append = %d, want 10", last)
	}
}

// BenchmarkRaftLogAppend appends one entry at a time to a log that holds
// the default SnapshotEvery + CompactionLag entries before it is compacted,
// as a member's in-memory raft log under steady writes.
func BenchmarkRaftLogAppend(b *testing.B) {
	type store interface {
		Append([]raftpb.Entry) error
		Compact(uint64) error
	}
	for _, c := range []struct {
		name string
		new  func() store
	}{
		{"MemoryStorage", func() store { return raft.NewMemoryStorage() }},
		{"memLog", func() store { return newMemLog() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.new()
			ents := memLogEntries(1, 1, 1)
			const keep, every = 5000, DefaultSnapshotEvery
			b.ReportAllocs()
			for i := uint64(1); i <= uint64(b.N); i++ {
				ents[0].Index = i
				if err := s.Append(ents); err != nil {
					b.Fatal(err)
				}
				if i%every == 0 && i > keep {
					if err := s.Compact(i - keep); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
