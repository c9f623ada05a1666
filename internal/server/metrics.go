package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/latch-io/latch/internal/raftnode"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that several servers can share a process in tests.
type metrics struct {
	registry         *prometheus.Registry
	term             prometheus.Gauge
	hasLeader        prometheus.Gauge
	leaderChanges    prometheus.Counter
	commitIndex      prometheus.GaugeFunc
	appliedIndex     prometheus.Gauge
	proposalsPending prometheus.Gauge
	proposalsFailed  prometheus.Counter
	walFsync         prometheus.Histogram
	entriesPerSave   prometheus.Histogram
	applyDuration    prometheus.Histogram
	snapshotDuration prometheus.Histogram
	snapshotsFailed  prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	latency := prometheus.ExponentialBuckets(0.0001, 2, 16) // 100µs .. ~3.3s
	m := &metrics{
		registry:         prometheus.NewRegistry(),
		term:             prometheus.NewGauge(prometheus.GaugeOpts{Name: "latch_raft_term", Help: "Current raft term."}),
		hasLeader:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "latch_raft_has_leader", Help: "1 if a leader is known."}),
		leaderChanges:    prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_raft_leader_changes_total", Help: "Leader changes seen."}),
		appliedIndex:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "latch_raft_applied_index", Help: "Last applied raft index."}),
		proposalsPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "latch_proposals_pending", Help: "Proposals waiting to be applied."}),
		proposalsFailed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_proposals_failed_total", Help: "Proposals answered with an error of unknown outcome or refused for overload."}),
		walFsync:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_wal_fsync_duration_seconds", Help: "WAL save (write + fsync) latency per Ready.", Buckets: latency}),
		entriesPerSave:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_wal_entries_per_save", Help: "Raft entries written per WAL save (one fsync): the batching of a Ready.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		applyDuration:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_apply_duration_seconds", Help: "Apply latency per Ready batch.", Buckets: latency}),
		snapshotDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_snapshot_save_duration_seconds", Help: "Snapshot save latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		snapshotsFailed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_snapshot_save_failures_total", Help: "Snapshots that failed to save."}),
	}
	m.commitIndex = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_raft_commit_index", Help: "Commit index known here."},
		func() float64 {
			if g := s.main.Load(); g != nil {
				return float64(g.node.Status().Commit)
			}
			return 0
		})
	lockWakeups := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "latch_lock_wakeups_total",
		Help: "Lock and election waiters woken by the deletion of the node ahead of them (one per handoff without a herd)."},
		func() float64 {
			if g := s.main.Load(); g != nil {
				return float64(g.deletions.wakeups.Load())
			}
			return 0
		})
	m.registry.MustRegister(lockWakeups)
	m.registry.MustRegister(m.term, m.hasLeader, m.leaderChanges, m.commitIndex, m.appliedIndex,
		m.proposalsPending, m.proposalsFailed, m.walFsync, m.entriesPerSave, m.applyDuration, m.snapshotDuration, m.snapshotsFailed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) nodeHooks() raftnode.Hooks {
	return raftnode.Hooks{
		Persisted: func(d time.Duration, entries int) {
			m.walFsync.Observe(d.Seconds())
			m.entriesPerSave.Observe(float64(entries))
		},
		Applied: func(d time.Duration, _ int) { m.applyDuration.Observe(d.Seconds()) },
		SnapshotSave: func(d time.Duration, err error) {
			m.snapshotDuration.Observe(d.Seconds())
			if err != nil {
				m.snapshotsFailed.Inc()
			}
		},
	}
}

func (m *metrics) applied(index uint64) { m.appliedIndex.Set(float64(index)) }
func (m *metrics) proposalStarted()     { m.proposalsPending.Inc() }
func (m *metrics) proposalEnded()       { m.proposalsPending.Dec() }
func (m *metrics) proposalFailed()      { m.proposalsFailed.Inc() }

func (m *metrics) leaderChanged(leader, term uint64) {
	m.leaderChanges.Inc()
	m.term.Set(float64(term))
	if leader != 0 {
		m.hasLeader.Set(1)
	} else {
		m.hasLeader.Set(0)
	}
}

// MetricsHandler serves the server's metrics in the Prometheus format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
}
