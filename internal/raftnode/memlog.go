package raftnode

import (
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// memLogChunk is how many entries one chunk of a memLog holds: 512 entries
// of 48 bytes make 24 KiB, a small allocation.
const memLogChunk = 512

// memChunk holds the entries whose index divided by memLogChunk is the
// chunk's number, each at its index modulo memLogChunk.
type memChunk [memLogChunk]raftpb.Entry

// memLog is the in-memory raft log (raft.Storage): the entries a member has
// made durable since its last compaction, its hard state and its latest
// snapshot's metadata. It answers raft as raft.MemoryStorage does, but keeps
// its entries in fixed chunks instead of one slice: an append writes into
// the last chunk, or a new one, and never copies the entries before it.
// (MemoryStorage's slice, up to SnapshotEvery + CompactionLag entries long,
// is copied whole each time it outgrows its array: 4% of the members' CPU
// under loaded writes.)
//
// Invariants, under mu:
//   - offset is the index of the entry before the first one kept (the
//     latest snapshot's, or the compaction point), offsetTerm its term;
//     last is the last index kept (offset when none is);
//   - chunks[k] is chunk number base+k; the entries offset+1..last sit in
//     them at their places, and the chunks cover nothing beyond last's;
//   - an entry, once in a chunk, is never written again: Entries hands out
//     slices of the chunks, which raft may hold while it applies or sends
//     them. An append that replaces entries (a new leader's log overriding
//     this one's tail) copies the kept head of their chunk into a new
//     chunk, and appends only ever write places past last.
type memLog struct {
	mu         sync.Mutex
	hardState  raftpb.HardState
	snapshot   raftpb.Snapshot
	offset     uint64
	offsetTerm uint64
	last       uint64
	base       uint64
	chunks     []*memChunk
}

var _ raft.Storage = (*memLog)(nil)

func newMemLog() *memLog { return &memLog{} }

// InitialState returns the hard state and the latest snapshot's membership.
func (l *memLog) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hardState, l.snapshot.Metadata.ConfState, nil
}

// SetHardState records the hard state.
func (l *memLog) SetHardState(hs raftpb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hardState = hs
	return nil
}

// FirstIndex returns the index of the first entry kept (offset+1, even when
// none is).
func (l *memLog) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.offset + 1, nil
}

// LastIndex returns the index of the last entry kept, or the offset.
func (l *memLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, nil
}

// Snapshot returns the latest snapshot's metadata (its data stays in the
// snapshot store).
func (l *memLog) Snapshot() (raftpb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshot, nil
}

// Term returns the term of entry i: raft.ErrCompacted before the offset,
// raft.ErrUnavailable after the last entry.
func (l *memLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case i < l.offset:
		return 0, raft.ErrCompacted
	case i == l.offset:
		return l.offsetTerm, nil
	case i > l.last:
		return 0, raft.ErrUnavailable
	}
	return l.at(i).Term, nil
}

// at returns entry i, which must be kept.
func (l *memLog) at(i uint64) *raftpb.Entry {
	return &l.chunks[i/memLogChunk-l.base][i%memLogChunk]
}

// Entries returns the entries lo..hi-1, fewer if their encoded size passes
// maxSize (but at least one). Within one chunk they are a slice of it,
// capped so that an append to it cannot reach the chunk; across chunks, a
// copy.
func (l *memLog) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case lo <= l.offset:
		return nil, raft.ErrCompacted
	case hi > l.last+1 || l.last == l.offset:
		return nil, raft.ErrUnavailable
	case lo >= hi:
		return nil, nil
	}
	var out []raftpb.Entry
	var size uint64
	for i := lo; i < hi; {
		seg := l.chunks[i/memLogChunk-l.base][i%memLogChunk:]
		seg = seg[:min(uint64(len(seg)), hi-i)]
		var n int
		n, size = fitting(seg, size, maxSize, i == lo)
		if i == lo && (n < len(seg) || i+uint64(n) == hi) {
			return seg[:n:n], nil // all within the first chunk
		}
		out = append(out, seg[:n]...)
		if n < len(seg) {
			break
		}
		i += uint64(n)
	}
	return out[:len(out):len(out)], nil
}

// fitting returns how many of ents, from the first, keep the encoded size
// within maxSize after size bytes already taken, and the size with them.
// The first entry of an answer (first) is taken whatever its size, as raft
// asks.
func fitting(ents []raftpb.Entry, size, maxSize uint64, first bool) (int, uint64) {
	for i := range ents {
		next := size + uint64(ents[i].Size())
		if next > maxSize && (i > 0 || !first) {
			return i, size
		}
		size = next
	}
	return len(ents), size
}

// errLogGap is returned by Append for entries that would leave a hole
// after the last one kept.
var errLogGap = errors.New("raftnode: entries leave a gap in the raft log")

// Append adds entries, which are durable, replacing any kept entries at or
// after the first one's index. Entries at or before the offset are skipped.
func (l *memLog) Append(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	first := entries[0].Index
	if last := first + uint64(len(entries)) - 1; last <= l.offset {
		return nil
	}
	if first <= l.offset {
		entries = entries[l.offset+1-first:]
		first = l.offset + 1
	}
	if first > l.last+1 {
		return fmt.Errorf("%w: last %d, append at %d", errLogGap, l.last, first)
	}
	if first <= l.last {
		l.truncate(first - 1)
	}
	for len(entries) > 0 {
		pos := l.last + 1
		k := pos/memLogChunk - l.base
		if k == uint64(len(l.chunks)) {
			l.chunks = append(l.chunks, new(memChunk))
		}
		n := copy(l.chunks[k][pos%memLogChunk:], entries)
		entries = entries[n:]
		l.last += uint64(n)
	}
	return nil
}

// truncate drops the entries after index keep (offset <= keep < last). The
// kept head of keep's chunk moves to a new chunk, so that places already
// handed out are never written again.
func (l *memLog) truncate(keep uint64) {
	next := keep + 1
	k := next/memLogChunk - l.base
	if next%memLogChunk != 0 && keep > l.offset {
		fresh := new(memChunk)
		copy(fresh[:next%memLogChunk], l.chunks[k][:next%memLogChunk])
		l.chunks[k] = fresh
		k++
	}
	clear(l.chunks[k:])
	l.chunks = l.chunks[:k]
	l.last = keep
}

// Compact drops the entries up to index i, which becomes the offset:
// raft.ErrCompacted if it is not past the offset.
func (l *memLog) Compact(i uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i <= l.offset {
		return raft.ErrCompacted
	}
	if i > l.last {
		return fmt.Errorf("raftnode: compact raft log to %d past its last index %d", i, l.last)
	}
	l.offsetTerm = l.at(i).Term
	l.offset = i
	l.dropChunksBefore((i + 1) / memLogChunk)
	return nil
}

// dropChunksBefore lets go of the chunks numbered before n.
func (l *memLog) dropChunksBefore(n uint64) {
	if n <= l.base {
		return
	}
	drop := min(n-l.base, uint64(len(l.chunks)))
	clear(l.chunks[:drop])
	l.chunks = l.chunks[drop:]
	l.base = n
}

// ApplySnapshot replaces the log by snapshot s's point: every entry is
// dropped. raft.ErrSnapOutOfDate if s is not newer than the latest.
func (l *memLog) ApplySnapshot(s raftpb.Snapshot) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.Metadata.Index <= l.snapshot.Metadata.Index {
		return raft.ErrSnapOutOfDate
	}
	l.snapshot = s
	l.offset, l.offsetTerm, l.last = s.Metadata.Index, s.Metadata.Term, s.Metadata.Index
	clear(l.chunks)
	l.chunks = l.chunks[:0]
	l.base = (s.Metadata.Index + 1) / memLogChunk
	return nil
}

// CreateSnapshot records a snapshot at index i, a kept entry (or the
// offset), with membership cs and data: raft.ErrSnapOutOfDate if it is not
// newer than the latest.
func (l *memLog) CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (raftpb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i <= l.snapshot.Metadata.Index {
		return raftpb.Snapshot{}, raft.ErrSnapOutOfDate
	}
	var term uint64
	switch {
	case i < l.offset:
		return raftpb.Snapshot{}, raft.ErrCompacted
	case i > l.last:
		return raftpb.Snapshot{}, fmt.Errorf("raftnode: snapshot at %d past the raft log's last index %d", i, l.last)
	case i == l.offset:
		term = l.offsetTerm
	default:
		term = l.at(i).Term
	}
	l.snapshot.Metadata.Index, l.snapshot.Metadata.Term = i, term
	if cs != nil {
		l.snapshot.Metadata.ConfState = *cs
	}
	l.snapshot.Data = data
	return l.snapshot, nil
}
