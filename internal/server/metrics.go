package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that several servers can share a process in tests.
type metrics struct {
	registry *prometheus.Registry
	// The per-group series, labelled shard="k" (groupMetrics sets them).
	term             *prometheus.GaugeVec
	hasLeader        *prometheus.GaugeVec
	leaderChanges    *prometheus.CounterVec
	appliedIndex     *prometheus.GaugeVec
	proposalsPending prometheus.Gauge
	proposalsFailed  prometheus.Counter
	walFsync         prometheus.Histogram
	entriesPerSave   prometheus.Histogram
	applyDuration    prometheus.Histogram
	snapshotDuration prometheus.Histogram
	snapshotsFailed  prometheus.Counter

	// Sessions ended or made by the entries this member applied.
	sessionsCreated prometheus.Counter
	sessionsClosed  prometheus.Counter
	sessionsExpired prometheus.Counter

	// The client API's requests (ObserveRequest).
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	latency := prometheus.ExponentialBuckets(0.0001, 2, 16) // 100µs .. ~3.3s
	m := &metrics{
		registry:         prometheus.NewRegistry(),
		term:             prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "latch_raft_term", Help: "Current raft term, per shard."}, shardLabel),
		hasLeader:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "latch_raft_has_leader", Help: "1 if a leader is known, per shard."}, shardLabel),
		leaderChanges:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "latch_raft_leader_changes_total", Help: "Leader changes seen, per shard."}, shardLabel),
		appliedIndex:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "latch_raft_applied_index", Help: "Last applied raft index, per shard."}, shardLabel),
		proposalsPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "latch_proposals_pending", Help: "Proposals waiting to be applied."}),
		proposalsFailed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_proposals_failed_total", Help: "Proposals answered with an error of unknown outcome or refused for overload."}),
		walFsync:         prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_wal_fsync_duration_seconds", Help: "WAL save (write + fsync) latency per Ready.", Buckets: latency}),
		entriesPerSave:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_wal_entries_per_save", Help: "Raft entries written per WAL save (one fsync): the batching of a Ready.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		applyDuration:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_apply_duration_seconds", Help: "Apply latency per Ready batch.", Buckets: latency}),
		snapshotDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latch_snapshot_save_duration_seconds", Help: "Snapshot save latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		snapshotsFailed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_snapshot_save_failures_total", Help: "Snapshots that failed to save."}),
	}
	lockWakeups := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "latch_lock_wakeups_total",
		Help: "Lock and election waiters woken by the deletion of the node ahead of them (one per handoff without a herd)."},
		func() float64 {
			var total uint64
			for _, g := range s.allGroups() {
				if g != nil {
					total += g.queues.Wakeups()
				}
			}
			return float64(total)
		})
	quiesced := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_raft_groups_quiesced",
		Help: "Consensus groups (shards) quiesced on this member: idle, neither ticked nor heartbeating."},
		func() float64 { return float64(s.quiescedGroups()) })
	m.registry.MustRegister(lockWakeups, storageFullGauge(s), quiesced)
	m.registry.MustRegister(walFlushCounters(s)...)
	m.addSessionMetrics(s)
	m.registry.MustRegister(watchCollector{s}, raftCollector{s})
	m.addHTTPMetrics()
	m.registry.MustRegister(m.term, m.hasLeader, m.leaderChanges, m.appliedIndex,
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

// shardLabel labels the per-group series with the group's shard number.
var shardLabel = []string{"shard"}

// groupMetrics is one group's replica.Metrics: its series carry the
// group's shard label; proposals are counted over every group.
type groupMetrics struct {
	m     *metrics
	shard string
}

func (m *metrics) forShard(shard int) groupMetrics {
	gm := groupMetrics{m: m, shard: strconv.Itoa(shard)}
	// Every shard's series exist from the start, so a shard with no leader
	// yet reads 0 rather than being absent.
	m.hasLeader.WithLabelValues(gm.shard).Set(0)
	m.leaderChanges.WithLabelValues(gm.shard).Add(0)
	return gm
}

// The replica runtime's figures (replica.Metrics).
func (gm groupMetrics) Applied(index uint64) {
	gm.m.appliedIndex.WithLabelValues(gm.shard).Set(float64(index))
}
func (gm groupMetrics) ProposalStarted() { gm.m.proposalsPending.Inc() }
func (gm groupMetrics) ProposalEnded()   { gm.m.proposalsPending.Dec() }
func (gm groupMetrics) ProposalFailed()  { gm.m.proposalsFailed.Inc() }

// LeaderChanged records a leader change (replica.Metrics).
func (gm groupMetrics) LeaderChanged(leader, term uint64) {
	gm.m.leaderChanges.WithLabelValues(gm.shard).Inc()
	gm.m.term.WithLabelValues(gm.shard).Set(float64(term))
	if leader != 0 {
		gm.m.hasLeader.WithLabelValues(gm.shard).Set(1)
	} else {
		gm.m.hasLeader.WithLabelValues(gm.shard).Set(0)
	}
}

// raftCollector reports every running group's commit index, read from
// raft at scrape time, and how its Ready loop batches: the Readys it took
// and the proposals and peer messages stepped into raft
// (raftnode.Node.Batching).
type raftCollector struct{ s *Server }

var (
	commitIndexDesc = prometheus.NewDesc("latch_raft_commit_index", "Commit index known here, per shard.", shardLabel, nil)
	readysDesc      = prometheus.NewDesc("latch_raft_readys_total",
		"Readys the shard's Ready loop took (each one WAL save of what raft gathered since the last, and one send of each peer's messages), per shard.", shardLabel, nil)
	steppedDesc = prometheus.NewDesc("latch_raft_messages_stepped_total",
		"Proposals and peer messages stepped into the shard's raft, per shard: over latch_raft_readys_total, what one Ready carries.", shardLabel, nil)
	deferredDesc = prometheus.NewDesc("latch_raft_deferred_proposals_total",
		"Deferred proposals (a place behind another session's in a lock's queue, HTTP or ZooKeeper), per shard, by how they left: joined (with another proposal made or forwarded here) or alone (after their delay).",
		[]string{"shard", "left"}, nil)
)

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- commitIndexDesc
	ch <- readysDesc
	ch <- steppedDesc
	ch <- deferredDesc
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	for shard, g := range c.s.allGroups() {
		if g == nil {
			continue
		}
		label := strconv.Itoa(shard)
		node := g.Node()
		ch <- prometheus.MustNewConstMetric(commitIndexDesc, prometheus.GaugeValue, float64(node.Status().Commit), label)
		readys, stepped := node.Batching()
		ch <- prometheus.MustNewConstMetric(readysDesc, prometheus.CounterValue, float64(readys), label)
		ch <- prometheus.MustNewConstMetric(steppedDesc, prometheus.CounterValue, float64(stepped), label)
		joined, alone := node.Deferrals()
		ch <- prometheus.MustNewConstMetric(deferredDesc, prometheus.CounterValue, float64(joined), label, "joined")
		ch <- prometheus.MustNewConstMetric(deferredDesc, prometheus.CounterValue, float64(alone), label, "alone")
	}
}

// MetricsHandler serves the server's metrics in the Prometheus format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
}

// addSessionMetrics registers the session series. The counters count the
// entries this member applied since it started (a restart replays the log
// after its last snapshot, so they may count again what they counted before
// it); the gauge is the state machine's.
func (m *metrics) addSessionMetrics(s *Server) {
	m.sessionsCreated = prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_sessions_created_total",
		Help: "Sessions created by the entries this member applied since it started."})
	m.sessionsClosed = prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_sessions_closed_total",
		Help: "Sessions closed by their clients, in the entries this member applied since it started."})
	m.sessionsExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_sessions_expired_total",
		Help: "Sessions expired for want of heartbeats, in the entries this member applied since it started."})
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_sessions_live", Help: "Live sessions in the state this member applied."},
		func() float64 {
			g := s.metaGroup()
			if g == nil {
				return 0
			}
			var n int
			g.View(func(f *fsm.FSM) { n = f.SessionCount() })
			return float64(n)
		})
	m.registry.MustRegister(m.sessionsCreated, m.sessionsClosed, m.sessionsExpired, live)
}

// The session feature's counts of the sessions applied entries created or
// ended (sessions.Metrics).
func (m *metrics) SessionsCreated(n int) { m.sessionsCreated.Add(float64(n)) }
func (m *metrics) SessionsClosed(n int)  { m.sessionsClosed.Add(float64(n)) }
func (m *metrics) SessionsExpired(n int) { m.sessionsExpired.Add(float64(n)) }

// watchCollector reports the watch registry's figures, read once per
// scrape.
type watchCollector struct{ s *Server }

var (
	watchesRegisteredDesc = prometheus.NewDesc("latch_watches_registered",
		"Watches registered on this member (watches are local to the member that registered them).", nil, nil)
	watchRegistrationsDesc = prometheus.NewDesc("latch_watch_registrations_total",
		"Watch registrations this member accepted.", nil, nil)
	watchRefusalsDesc = prometheus.NewDesc("latch_watch_registrations_refused_total",
		"Watch registrations this member refused, by reason (no_stream: the session had no event stream open here).", []string{"reason"}, nil)
	watchesDroppedDesc = prometheus.NewDesc("latch_watches_dropped_total",
		"Watches dropped with their session's queue because the session fell behind (slow consumer) or the state was restored from a snapshot; clients re-register them.", nil, nil)
	watchesExpiredDesc = prometheus.NewDesc("latch_watches_expired_total",
		"Watches ended by the expiry, by this member's clock, of the token that registered them.", nil, nil)
	watchDisconnectsDesc = prometheus.NewDesc("latch_watch_sessions_disconnected_total",
		"Sessions whose watches and queued events were dropped (slow consumer or snapshot restore).", nil, nil)
	watchFiredDesc = prometheus.NewDesc("latch_watch_events_fired_total",
		"Watch events queued for sessions' event streams.", nil, nil)
	watchDeliveredDesc = prometheus.NewDesc("latch_watch_events_delivered_total",
		"Watch events handed to sessions' event streams.", nil, nil)
	watchQueuedDesc = prometheus.NewDesc("latch_watch_events_queued",
		"Watch events queued and not yet delivered, over all sessions.", nil, nil)
	streamsOpenDesc = prometheus.NewDesc("latch_event_streams_open",
		"Sessions' event streams (GET /v1/session/{id}/events) attached on this member.", nil, nil)
)

func (c watchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{watchesRegisteredDesc, watchRegistrationsDesc, watchRefusalsDesc, watchesDroppedDesc,
		watchesExpiredDesc, watchDisconnectsDesc, watchFiredDesc, watchDeliveredDesc, watchQueuedDesc, streamsOpenDesc} {
		ch <- d
	}
}

func (c watchCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.metaGroup() == nil {
		return
	}
	st := c.s.watches.Stats()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(watchesRegisteredDesc, gauge, float64(st.Watches))
	ch <- prometheus.MustNewConstMetric(watchRegistrationsDesc, counter, float64(st.WatchesAdded))
	ch <- prometheus.MustNewConstMetric(watchRefusalsDesc, counter, float64(st.RefusedNoStream), "no_stream")
	ch <- prometheus.MustNewConstMetric(watchesDroppedDesc, counter, float64(st.WatchesDropped))
	ch <- prometheus.MustNewConstMetric(watchesExpiredDesc, counter, float64(st.WatchesExpired))
	ch <- prometheus.MustNewConstMetric(watchDisconnectsDesc, counter, float64(st.SessionsDisconnected))
	ch <- prometheus.MustNewConstMetric(watchFiredDesc, counter, float64(st.EventsFired))
	ch <- prometheus.MustNewConstMetric(watchDeliveredDesc, counter, float64(st.EventsDelivered))
	ch <- prometheus.MustNewConstMetric(watchQueuedDesc, gauge, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(streamsOpenDesc, gauge, float64(st.Streams))
}

// addHTTPMetrics registers the client API's request series.
func (m *metrics) addHTTPMetrics() {
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "latch_http_requests_total",
		Help: "Client API requests served, by method, route pattern and status code; an event stream counts when it ends."},
		[]string{"method", "route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "latch_http_request_duration_seconds",
		Help:    "Client API request latency, by method and route pattern, from the request's arrival to the handler's return; event streams are not included (see latch_event_streams_open).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, // 0.5ms .. ~16s
		[]string{"method", "route"})
	m.registry.MustRegister(m.httpRequests, m.httpDuration)
}

// ObserveRequest records one served client API request: method (one of a
// bounded set), route (the route's pattern, never the raw path), the status
// code, and how long it took; a streamed reply (an event stream, which lasts
// as long as its client wants) is counted without its duration.
func (s *Server) ObserveRequest(method, route string, code int, took time.Duration, streamed bool) {
	s.metrics.httpRequests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	if !streamed {
		s.metrics.httpDuration.WithLabelValues(method, route).Observe(took.Seconds())
	}
}
