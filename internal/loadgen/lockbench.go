package loadgen

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/loadgen/latency"
)

// 'latchctl lock-bench' measures lock hand-offs: --clients workers, each a
// client with a session of its own, loop acquire + release (holding for
// nothing) on --locks locks (worker i uses lock i mod --locks) for
// --duration, through client/recipe.Lock exactly as an application would.
// It reports complete cycles a second, the latency of Acquire (which
// includes the wait in the queue behind the other workers of the same lock)
// and of Release, and from each server's /metrics the raft applied index,
// CPU and memory deltas over the run: the applied delta per cycle shows what
// a hand-off writes (an enqueue and a delete: 2). Sessions are created
// before the clock starts and closed after it stops.

// LockBenchConfig is what 'latchctl lock-bench' runs.
type LockBenchConfig struct {
	Clients        int           `json:"clients"`
	Locks          int           `json:"locks"`
	Duration       time.Duration `json:"-"`
	SessionTimeout time.Duration `json:"-"`
	Prefix         string        `json:"prefix"` // locks are named PREFIX-N
}

// LockBenchResult is the report of a run.
type LockBenchResult struct {
	LockBenchConfig
	DurationSeconds float64           `json:"duration_s"`
	Cycles          uint64            `json:"cycles"` // acquire + release, both successful
	CyclesPerSecond float64           `json:"cycles_per_s"`
	Errors          uint64            `json:"errors"`
	ErrorsByCode    map[string]uint64 `json:"errors_by_code,omitempty"`
	Acquire         LatencySummary    `json:"acquire_latency"`
	Release         LatencySummary    `json:"release_latency"`
	// EntriesPerCycle is the first endpoint's applied index delta over the
	// run divided by Cycles (the cancelled waiters of the end add a little).
	EntriesPerCycle float64     `json:"raft_entries_per_cycle"`
	Nodes           []NodeDelta `json:"nodes"`
	// MetricsError says why Nodes is empty: a server without /metrics.
	MetricsError string `json:"metrics_error,omitempty"`
	LoadBefore   string `json:"loadavg_before,omitempty"`
	LoadAfter    string `json:"loadavg_after,omitempty"`
}

func (cfg *LockBenchConfig) Validate() error {
	switch {
	case cfg.Clients < 1 || cfg.Locks < 1 || cfg.Duration <= 0 || cfg.SessionTimeout <= 0:
		return usagef("--clients and --locks must be at least 1, --duration and --session-timeout positive")
	case cfg.Prefix == "" || strings.Contains(cfg.Prefix, "/"):
		return usagef("--prefix %q: want one path segment", cfg.Prefix)
	}
	return nil
}

// lockWorker is one worker's state; only its goroutine touches it until the
// run ends.
type lockWorker struct {
	client  *client.Client
	session *client.Session
	lock    *recipe.Lock
	cycles  uint64
	acquire *latency.Histogram
	release *latency.Histogram
	errors  map[api.Code]uint64
}

// RunLockBench creates the workers' sessions, runs them for cfg.Duration
// (or until ctx ends), closes the sessions and merges the figures.
func RunLockBench(ctx context.Context, conn client.Config, cfg LockBenchConfig) (*LockBenchResult, error) {
	target := newBenchTarget(conn)
	defer target.close()
	workers, err := newLockWorkers(ctx, target, cfg)
	defer closeLockWorkers(workers)
	if err != nil {
		return nil, err
	}
	servers := serverSampler{http: target.httpClient(), endpoints: conn.Endpoints}
	result := &LockBenchResult{LockBenchConfig: cfg, ErrorsByCode: map[string]uint64{}, LoadBefore: loadAverage()}
	before, sampleErr := servers.sample(ctx)
	elapsed := runTimed(ctx, cfg.Duration, len(workers), func(stop context.Context, i int) { workers[i].run(stop) })
	result.DurationSeconds = elapsed.Seconds()
	result.LoadAfter = loadAverage()
	var after []nodeSample
	if sampleErr == nil {
		after, sampleErr = servers.sample(ctx)
	}
	if sampleErr != nil {
		result.MetricsError = sampleErr.Error()
	} else {
		result.Nodes = deltas(before, after, result.DurationSeconds, 0)
	}
	collectLockBench(result, workers)
	return result, nil
}

// newLockWorkers makes each worker's client, session and lock; sessions are
// created in parallel.
func newLockWorkers(ctx context.Context, target *benchTarget, cfg LockBenchConfig) ([]*lockWorker, error) {
	workers := make([]*lockWorker, cfg.Clients)
	errs := make([]error, cfg.Clients)
	var wg sync.WaitGroup
	for i := range workers {
		c, err := target.newClient()
		if err != nil {
			return workers, err
		}
		w := &lockWorker{client: c, acquire: latency.New(), release: latency.New(), errors: map[api.Code]uint64{}}
		workers[i] = w
		wg.Go(func() {
			w.session, errs[i] = c.NewSession(ctx, cfg.SessionTimeout)
			if errs[i] == nil {
				w.lock = recipe.NewLock(w.session, fmt.Sprintf("%s-%d", cfg.Prefix, i%cfg.Locks))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return workers, fmt.Errorf("lock-bench: create session: %w", err)
		}
	}
	return workers, nil
}

// closeLockWorkers closes the sessions (releasing whatever they hold) and
// the clients.
func closeLockWorkers(workers []*lockWorker) {
	var wg sync.WaitGroup
	for _, w := range workers {
		if w == nil {
			continue
		}
		wg.Go(func() {
			if w.session != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = w.session.Close(ctx)
				cancel()
			}
			_ = w.client.Close()
		})
	}
	wg.Wait()
}

// lockBenchReleaseTimeout bounds one Release, which must finish even after the run
// was stopped.
const lockBenchReleaseTimeout = 10 * time.Second

// lockBenchErrorPause is the pause after a failed Acquire, so that a
// worker whose calls fail at once does not spin.
const lockBenchErrorPause = 20 * time.Millisecond

// run acquires and releases until ctx ends. An Acquire that ctx cancelled
// gives its place up and is not counted.
func (w *lockWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		started := time.Now()
		_, err := w.lock.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.errors[api.CodeOf(err)]++
				sleepUntil(ctx, time.Now().Add(lockBenchErrorPause))
			}
			continue
		}
		acquired := time.Now()
		releaseCtx, cancel := context.WithTimeout(context.Background(), lockBenchReleaseTimeout)
		err = w.lock.Release(releaseCtx)
		cancel()
		if err != nil {
			w.errors[api.CodeOf(err)]++
			continue
		}
		w.acquire.Record(acquired.Sub(started))
		w.release.Record(time.Since(acquired))
		w.cycles++
	}
}

// collectLockBench merges the workers' figures into result.
func collectLockBench(result *LockBenchResult, workers []*lockWorker) {
	acquire, release := latency.New(), latency.New()
	for _, w := range workers {
		acquire.Merge(w.acquire)
		release.Merge(w.release)
		result.Cycles += w.cycles
		result.Errors += tallyErrors(result.ErrorsByCode, w.errors)
	}
	result.CyclesPerSecond = float64(result.Cycles) / max(result.DurationSeconds, 1e-9)
	result.Acquire = summarize(acquire)
	result.Release = summarize(release)
	if result.Cycles > 0 && len(result.Nodes) > 0 {
		result.EntriesPerCycle = float64(result.Nodes[0].AppliedDelta) / float64(result.Cycles)
	}
}

// loadAverage returns the first three fields of /proc/loadavg, or "" where
// there is none.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return ""
	}
	return strings.Join(fields[:3], " ")
}

func PrintLockBench(w io.Writer, r *LockBenchResult) {
	fmt.Fprintf(w, "%d clients on %d lock(s), session timeout %v; load average %s -> %s\n",
		r.Clients, r.Locks, r.SessionTimeout, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(w, "%d cycles in %.2fs: %.0f cycles/s, %d errors; %.2f raft entries per cycle\n",
		r.Cycles, r.DurationSeconds, r.CyclesPerSecond, r.Errors, r.EntriesPerCycle)
	printLatency(w, "acquire", r.Acquire)
	printLatency(w, "release", r.Release)
	printErrors(w, r.ErrorsByCode)
	printDeltas(w, "run", r.Nodes)
	if r.MetricsError != "" {
		fmt.Fprintf(w, "  no server figures: %s\n", r.MetricsError)
	}
}
