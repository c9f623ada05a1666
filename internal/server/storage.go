package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/wal"
)

// Storage states of /v1/status.
const (
	StorageOK       = "ok"
	StorageDiskFull = "disk full"
)

// storageState is what the raft node reported of its storage (raftnode's
// StorageFull hook): the parts ("wal", "snapshot") that found the
// filesystem full, and why. Safe for concurrent use.
type storageState struct {
	mu   sync.Mutex
	full map[string]error // guarded by mu
}

// set records part full (err) or writing again (nil).
func (st *storageState) set(part string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.full == nil {
		st.full = map[string]error{}
	}
	if err == nil {
		delete(st.full, part)
		return
	}
	st.full[part] = err
}

// describe returns "" when nothing is full, else the parts and their errors.
func (st *storageState) describe() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var parts []string
	for part, err := range st.full {
		parts = append(parts, fmt.Sprintf("%s: %v", part, err))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// walFull reports whether the WAL cannot write: this member persists nothing.
func (st *storageState) walFull() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, full := st.full["wal"]
	return full
}

// status is the state /v1/status shows.
func (st *storageState) status() string {
	if st.describe() != "" {
		return StorageDiskFull
	}
	return StorageOK
}

// storageFull is the raft node's StorageFull hook.
func (s *Server) storageFull(part string, err error) {
	s.storage.set(part, err)
	if err != nil {
		s.log.Error("storage full: writes through this member are refused until space is freed", "part", part, "err", err)
		return
	}
	s.log.Warn("storage writes again", "part", part)
}

// admit refuses a proposal while this member's WAL cannot write: it could
// not persist its own entries, so it answers at once instead of letting the
// request wait out its deadline. (A full snapshot store alone refuses
// nothing: the WAL keeps every entry meanwhile.)
func (s *Server) admit() error {
	if !s.storage.walFull() {
		return nil
	}
	return api.Errorf(api.CodeUnavailable, "storage full on member %s (%s): writes through it are refused until space is freed; use another member",
		s.cfg.Name, s.storage.describe())
}

// Propose is the replica's Propose, refused while the WAL has no space.
// Every proposal of the server and its features goes through it.
func (g *group) Propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	if g.admit != nil {
		if err := g.admit(); err != nil {
			return fsm.Result{}, 0, err
		}
	}
	return g.proposeRouted(ctx, cmd)
}

// nodeHooks are the metrics' raft node hooks and the storage report.
func (s *Server) nodeHooks() raftnode.Hooks {
	hooks := s.metrics.nodeHooks()
	hooks.StorageFull = s.storageFull
	return hooks
}

// storageFullGauge is latch_storage_full: 1 while a part of storage found
// the filesystem full.
func storageFullGauge(s *Server) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_storage_full",
		Help: "1 while this member's WAL or snapshot store cannot get space (disk full); /v1/status storage says which."},
		func() float64 {
			if s.storage.status() == StorageDiskFull {
				return 1
			}
			return 0
		})
}

// walFlushCounters are the WAL's running counts (wal.Stats): flushes (one
// write and one fsync each), the Save calls, groups and entries they
// carried. Entries over flushes is the group commit achieved across every
// shard of the process.
func walFlushCounters(s *Server) []prometheus.Collector {
	counter := func(name, help string, read func(wal.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if s.wal == nil {
				return 0
			}
			return float64(read(s.wal.Stats()))
		})
	}
	return []prometheus.Collector{
		counter("latch_wal_flushes_total", "WAL flushes written, each one write and one fsync (the zeros written ahead not counted), covering the saves of every shard queued together (group commit).",
			func(st wal.Stats) uint64 { return st.Flushes }),
		counter("latch_wal_flushed_saves_total", "WAL save calls (one shard's Ready batches each) written by the flushes.",
			func(st wal.Stats) uint64 { return st.Saves }),
		counter("latch_wal_flushed_groups_total", "Sum over WAL flushes of the shards each carried: over latch_wal_flushes_total, the shards one fsync covered.",
			func(st wal.Stats) uint64 { return st.Groups }),
		counter("latch_wal_flushed_entries_total", "Raft entries written by the WAL flushes: over latch_wal_flushes_total, the entries one fsync covered.",
			func(st wal.Stats) uint64 { return st.Entries }),
	}
}
