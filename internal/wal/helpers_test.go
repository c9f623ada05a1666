package wal

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/testseed"
)

var seedFlag = flag.Int64("seed", 0, "seed for randomized tests (0: from time or WAL_SEED)")

// testSeed returns the seed to use and logs it so a failure can be replayed
// with -seed.
func testSeed(t testing.TB) int64 {
	return int64(testseed.Pick(t, uint64(*seedFlag), "WAL_SEED"))
}

// longTests reports whether the exhaustive variants were asked for (WAL_LONG=1).
func longTests() bool { return os.Getenv("WAL_LONG") == "1" }

func quietOptions(segmentSize int64) Options {
	return Options{SegmentSize: segmentSize, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// model is an independent reference of what the log must return for a
// group: a map of index to entry with raft's truncation rule.
type model struct {
	snapshot  SnapshotMarker
	hardState raftpb.HardState
	entries   map[uint64]raftpb.Entry
}

func newModel() *model { return &model{entries: map[uint64]raftpb.Entry{}} }

func (m *model) clone() *model {
	out := &model{snapshot: m.snapshot, hardState: m.hardState, entries: map[uint64]raftpb.Entry{}}
	for index, entry := range m.entries {
		out.entries[index] = entry
	}
	return out
}

func (m *model) apply(batch Batch) {
	if batch.Snapshot != nil && batch.Snapshot.Index > m.snapshot.Index {
		m.snapshot = *batch.Snapshot
		for index := range m.entries {
			if index <= m.snapshot.Index {
				delete(m.entries, index)
			}
		}
	}
	for _, entry := range batch.Entries {
		if entry.Index <= m.snapshot.Index {
			continue
		}
		for index := range m.entries {
			if index >= entry.Index {
				delete(m.entries, index)
			}
		}
		m.entries[entry.Index] = entry
	}
	if batch.HardState != (raftpb.HardState{}) {
		m.hardState = batch.HardState
	}
}

func (m *model) lastIndex() uint64 {
	last := m.snapshot.Index
	for index := range m.entries {
		last = max(last, index)
	}
	return last
}

// diff describes how got differs from the model, or returns "".
func (m *model) diff(got *GroupState) string {
	if got == nil {
		got = &GroupState{}
	}
	if got.Snapshot != m.snapshot {
		return fmt.Sprintf("snapshot %+v, want %+v", got.Snapshot, m.snapshot)
	}
	if got.HardState != m.hardState {
		return fmt.Sprintf("hard state %+v, want %+v", got.HardState, m.hardState)
	}
	if len(got.Entries) != len(m.entries) {
		return fmt.Sprintf("%d entries, want %d", len(got.Entries), len(m.entries))
	}
	for i, entry := range got.Entries {
		want, ok := m.entries[m.snapshot.Index+1+uint64(i)]
		if !ok || entry.Index != want.Index || entry.Term != want.Term || string(entry.Data) != string(want.Data) {
			return fmt.Sprintf("entry %d is %d/%d %q, want %+v", i, entry.Index, entry.Term, entry.Data, want)
		}
	}
	return ""
}

func diffAll(models map[uint64]*model, states map[uint64]*GroupState) string {
	for group, m := range models {
		if d := m.diff(states[group]); d != "" {
			return fmt.Sprintf("group %d: %s", group, d)
		}
	}
	for group, state := range states {
		if _, ok := models[group]; !ok && (len(state.Entries) > 0 || state.Snapshot != (SnapshotMarker{})) {
			return fmt.Sprintf("group %d present but never written", group)
		}
	}
	return ""
}

// generator makes raft-plausible random batches.
type generator struct {
	random *rand.Rand
	groups int
	term   map[uint64]uint64
	models map[uint64]*model
	// inflight is the models plus a Save call whose outcome is unknown.
	inflight map[uint64]*model
}

func newGenerator(random *rand.Rand, groups int) *generator {
	g := &generator{random: random, groups: groups, term: map[uint64]uint64{}, models: map[uint64]*model{}}
	for group := uint64(1); group <= uint64(groups); group++ {
		g.models[group] = newModel()
		g.term[group] = 1
	}
	return g
}

func (g *generator) batch(group uint64) Batch {
	m := g.models[group]
	batch := Batch{Group: group}
	last := m.lastIndex()
	roll := g.random.Intn(100)
	switch {
	case roll < 8 && last > 0:
		index := m.snapshot.Index + uint64(g.random.Int63n(int64(last-m.snapshot.Index)+3))
		if index > m.snapshot.Index {
			batch.Snapshot = &SnapshotMarker{Index: index, Term: g.term[group]}
			last = max(last, index)
		}
	case roll < 16 && last > m.snapshot.Index:
		g.term[group]++ // a new leader overwrites a suffix
		last = m.snapshot.Index + uint64(g.random.Int63n(int64(last-m.snapshot.Index)))
	}
	count := g.random.Intn(6)
	for i := 0; i < count; i++ {
		batch.Entries = append(batch.Entries, raftpb.Entry{Index: last + 1 + uint64(i), Term: g.term[group], Data: g.data()})
	}
	if g.random.Intn(2) == 0 {
		batch.HardState = raftpb.HardState{Term: g.term[group], Vote: uint64(g.random.Intn(3)), Commit: last}
	}
	return batch
}

func (g *generator) data() []byte {
	if g.random.Intn(20) == 0 {
		return make([]byte, 600) // zero sectors inside a record
	}
	data := make([]byte, g.random.Intn(300))
	g.random.Read(data)
	return data
}

func (g *generator) call() []Batch {
	var batches []Batch
	for group := uint64(1); group <= uint64(g.groups); group++ {
		if g.random.Intn(3) > 0 {
			batches = append(batches, g.batch(group))
		}
	}
	return batches
}

// resetTo makes the models the recovered state and restarts terms above it.
func (g *generator) resetTo(states map[uint64]*GroupState) {
	for group := range g.models {
		m := newModel()
		if state, ok := states[group]; ok {
			m.snapshot, m.hardState = state.Snapshot, state.HardState
			for _, entry := range state.Entries {
				m.entries[entry.Index] = entry
				g.term[group] = max(g.term[group], entry.Term)
			}
		}
		g.models[group] = m
	}
}

func cloneModels(models map[uint64]*model) map[uint64]*model {
	out := map[uint64]*model{}
	for group, m := range models {
		out[group] = m.clone()
	}
	return out
}

func hardStateForFuzz() raftpb.HardState { return raftpb.HardState{Term: 4, Vote: 2, Commit: 17} }
