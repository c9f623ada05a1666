package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/cli/latency"
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

// lockBenchConfig is what 'latchctl lock-bench' runs.
type lockBenchConfig struct {
	Clients        int           `json:"clients"`
	Locks          int           `json:"locks"`
	Duration       time.Duration `json:"-"`
	SessionTimeout time.Duration `json:"-"`
	Prefix         string        `json:"prefix"` // locks are named PREFIX-N
}

// lockBenchResult is the report of a run.
type lockBenchResult struct {
	lockBenchConfig
	DurationSeconds float64           `json:"duration_s"`
	Cycles          uint64            `json:"cycles"` // acquire + release, both successful
	CyclesPerSecond float64           `json:"cycles_per_s"`
	Errors          uint64            `json:"errors"`
	ErrorsByCode    map[string]uint64 `json:"errors_by_code,omitempty"`
	Acquire         latencySummary    `json:"acquire_latency"`
	Release         latencySummary    `json:"release_latency"`
	// EntriesPerCycle is the first endpoint's applied index delta over the
	// run divided by Cycles (the cancelled waiters of the end add a little).
	EntriesPerCycle float64     `json:"raft_entries_per_cycle"`
	Nodes           []nodeDelta `json:"nodes"`
	// MetricsError says why Nodes is empty: a server without /metrics.
	MetricsError string `json:"metrics_error,omitempty"`
	LoadBefore   string `json:"loadavg_before,omitempty"`
	LoadAfter    string `json:"loadavg_after,omitempty"`
}

func (a *app) lockBenchCommand() *cobra.Command {
	cfg := lockBenchConfig{}
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "lock-bench",
		Short: "measure lock acquire+release cycles/s and acquire latency with many clients on one or many locks",
		Long: "lock-bench runs --clients workers, each with a client and a session of its own, that\n" +
			"acquire and release (client/recipe.Lock) back to back for --duration; worker i uses lock\n" +
			"PREFIX-(i mod --locks). It reports cycles/s, p50/p99 latency of Acquire (queueing behind\n" +
			"the other holders of the same lock included) and of Release, the raft entries written per\n" +
			"cycle, and each server's CPU over the run. Example (the figures of docs/benchmarks.md):\n" +
			"  latchctl lock-bench --endpoints http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003 \\\n" +
			"    --clients 16 --locks 1 --duration 20s",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			result, err := profiled(cpuProfile, func() (*lockBenchResult, error) {
				return runLockBench(cmd.Context(), a.endpoints, a.dialTimeout, cfg)
			})
			return a.printResult(result, err, func(w io.Writer) { printLockBench(w, result) })
		},
	}
	flags := cmd.Flags()
	flags.IntVar(&cfg.Clients, "clients", 16, "concurrent workers, each with its own client and session")
	flags.IntVar(&cfg.Locks, "locks", 1, "distinct locks the workers spread over")
	flags.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	flags.DurationVar(&cfg.SessionTimeout, "session-timeout", 10*time.Second, "timeout of the workers' sessions")
	flags.StringVar(&cfg.Prefix, "prefix", "lock-bench", "lock names are PREFIX-N")
	flags.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator to this file")
	return cmd
}

func (cfg *lockBenchConfig) validate() error {
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

// runLockBench creates the workers' sessions, runs them for cfg.Duration
// (or until ctx ends), closes the sessions and merges the figures.
func runLockBench(ctx context.Context, endpoints []string, dialTimeout time.Duration, cfg lockBenchConfig) (*lockBenchResult, error) {
	target := newBenchTarget(endpoints, dialTimeout)
	defer target.close()
	workers, err := newLockWorkers(ctx, target, cfg)
	defer closeLockWorkers(workers)
	if err != nil {
		return nil, err
	}
	servers := serverSampler{http: target.httpClient(), endpoints: endpoints}
	result := &lockBenchResult{lockBenchConfig: cfg, ErrorsByCode: map[string]uint64{}, LoadBefore: loadAverage()}
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
func newLockWorkers(ctx context.Context, target *benchTarget, cfg lockBenchConfig) ([]*lockWorker, error) {
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
func collectLockBench(result *lockBenchResult, workers []*lockWorker) {
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

func printLockBench(w io.Writer, r *lockBenchResult) {
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
