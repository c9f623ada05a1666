package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/loadgen/latency"
)

// BenchConfig is what 'latchctl bench' runs.
type BenchConfig struct {
	Op           string        `json:"op"`          // put, get or mixed
	Consistency  string        `json:"consistency"` // of the reads
	Clients      int           `json:"clients"`
	Duration     time.Duration `json:"-"`
	ValueSize    int           `json:"value_size"`
	Keys         int           `json:"keys"`
	ReadFraction float64       `json:"read_fraction,omitempty"` // of mixed
	Prefix       string        `json:"prefix"`
	// Dirs spreads the keys over that many directories under Prefix
	// (PREFIX/dNNNN/kNNNNNNN, key i in directory i mod Dirs): on a sharded
	// cluster a directory's children share one shard, so keys in one
	// directory (Dirs 0 or 1: PREFIX/kNNNNNNN) all land in one shard.
	Dirs int    `json:"dirs,omitempty"`
	Seed uint64 `json:"seed"`
}

// BenchResult is the report of a run.
type BenchResult struct {
	BenchConfig
	DurationSeconds float64           `json:"duration_s"` // measured
	Ops             uint64            `json:"ops"`        // successful operations
	OpsPerSecond    float64           `json:"ops_per_s"`
	Errors          uint64            `json:"errors"`
	ErrorsByCode    map[string]uint64 `json:"errors_by_code,omitempty"`
	Latency         LatencySummary    `json:"latency"`
	Reads           *OpSummary        `json:"reads,omitempty"`  // mixed only
	Writes          *OpSummary        `json:"writes,omitempty"` // mixed only
}

type OpSummary struct {
	Ops          uint64         `json:"ops"`
	OpsPerSecond float64        `json:"ops_per_s"`
	Latency      LatencySummary `json:"latency"`
}

func (cfg *BenchConfig) Validate() error {
	switch {
	case cfg.Op != "put" && cfg.Op != "get" && cfg.Op != "mixed":
		return usagef("--op %q: want put, get or mixed", cfg.Op)
	case cfg.Consistency != api.Linearizable && cfg.Consistency != api.Stale:
		return usagef("--consistency %q: want linearizable or stale", cfg.Consistency)
	case cfg.Clients < 1 || cfg.Keys < 1 || cfg.ValueSize < 0 || cfg.Duration <= 0:
		return usagef("--clients and --keys must be at least 1, --duration positive, --value-size not negative")
	case cfg.Dirs < 0 || cfg.Dirs > cfg.Keys:
		return usagef("--dirs must be within [0, --keys]")
	case cfg.ReadFraction < 0 || cfg.ReadFraction > 1:
		return usagef("--read-fraction must be within [0, 1]")
	}
	if err := api.ValidatePath(cfg.Prefix); err != nil {
		return usagef("--prefix: %v", err)
	}
	if cfg.Op != "mixed" {
		cfg.ReadFraction = 0
	}
	return nil
}

// benchWorker is one client's loop state; only its goroutine touches it
// until the run ends.
type benchWorker struct {
	client *client.Client
	rng    *rand.Rand
	reads  *latency.Histogram
	writes *latency.Histogram
	errors map[api.Code]uint64
}

// benchKeys is the run's key paths: under Prefix, or spread over Dirs
// directories under it.
func benchKeys(cfg BenchConfig) []string {
	keys := make([]string, cfg.Keys)
	for i := range keys {
		name := fmt.Sprintf("k%07d", i)
		if cfg.Dirs > 1 {
			keys[i] = api.Join(api.Join(cfg.Prefix, fmt.Sprintf("d%04d", i%cfg.Dirs)), name)
		} else {
			keys[i] = api.Join(cfg.Prefix, name)
		}
	}
	return keys
}

// RunBench prepares the keys, runs the workers for cfg.Duration (or until
// ctx ends) and merges their figures.
func RunBench(ctx context.Context, conn client.Config, cfg BenchConfig) (*BenchResult, error) {
	target := newBenchTarget(conn)
	defer target.close()
	keys := benchKeys(cfg)
	value := randomValue(cfg.ValueSize, cfg.Seed)
	workers := make([]*benchWorker, 0, cfg.Clients)
	defer func() {
		for _, w := range workers {
			_ = w.client.Close()
		}
	}()
	for i := range cfg.Clients {
		c, err := target.newClient()
		if err != nil {
			return nil, err
		}
		workers = append(workers, &benchWorker{client: c, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))),
			reads: latency.New(), writes: latency.New(), errors: map[api.Code]uint64{}})
	}
	if cfg.Op != "put" {
		if err := populate(ctx, workers, keys, value); err != nil {
			return nil, fmt.Errorf("bench: writing the keys before reading them: %w", err)
		}
	}
	elapsed := runTimed(ctx, cfg.Duration, len(workers), func(stop context.Context, i int) {
		workers[i].run(ctx, stop, cfg, keys, value)
	})
	return collect(cfg, workers, elapsed), nil
}

// run sends requests back to back until stop ends; a request in flight
// then completes and counts, unless ctx ends too.
func (w *benchWorker) run(ctx, stop context.Context, cfg BenchConfig, keys []string, value string) {
	var readOpts []client.ReadOption
	if cfg.Consistency == api.Stale {
		readOpts = append(readOpts, client.Stale())
	}
	for stop.Err() == nil {
		key := keys[w.rng.IntN(len(keys))]
		read := cfg.Op == "get" || (cfg.Op == "mixed" && w.rng.Float64() < cfg.ReadFraction)
		started := time.Now()
		var err error
		if read {
			_, err = w.client.Get(ctx, key, readOpts...)
		} else {
			_, err = w.client.Put(ctx, key, value)
		}
		elapsed := time.Since(started)
		switch {
		case err != nil && ctx.Err() != nil:
			return // interrupted: the request did not fail on its own
		case err != nil:
			w.errors[api.CodeOf(err)]++
		case read:
			w.reads.Record(elapsed)
		default:
			w.writes.Record(elapsed)
		}
	}
}

// populate writes every key once, spreading the keys over the workers.
func populate(ctx context.Context, workers []*benchWorker, keys []string, value string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Go(func() {
			for k := i; k < len(keys) && errs[i] == nil; k += len(workers) {
				_, errs[i] = w.client.Put(ctx, keys[k], value)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func collect(cfg BenchConfig, workers []*benchWorker, elapsed time.Duration) *BenchResult {
	reads, writes, all := latency.New(), latency.New(), latency.New()
	result := &BenchResult{BenchConfig: cfg, DurationSeconds: elapsed.Seconds(), ErrorsByCode: map[string]uint64{}}
	for _, w := range workers {
		reads.Merge(w.reads)
		writes.Merge(w.writes)
		result.Errors += tallyErrors(result.ErrorsByCode, w.errors)
	}
	all.Merge(reads)
	all.Merge(writes)
	seconds := max(elapsed.Seconds(), 1e-9)
	result.Ops = all.Count()
	result.OpsPerSecond = float64(all.Count()) / seconds
	result.Latency = summarize(all)
	if cfg.Op == "mixed" {
		result.Reads = &OpSummary{Ops: reads.Count(), OpsPerSecond: float64(reads.Count()) / seconds, Latency: summarize(reads)}
		result.Writes = &OpSummary{Ops: writes.Count(), OpsPerSecond: float64(writes.Count()) / seconds, Latency: summarize(writes)}
	}
	return result
}

// randomValue returns n printable characters.
func randomValue(n int, seed uint64) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	rng := rand.New(rand.NewPCG(seed, 1<<62))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

func PrintBench(w io.Writer, r *BenchResult) {
	fmt.Fprintf(w, "op %s, consistency %s, %d clients, value %d bytes, %d keys, seed %d\n",
		r.Op, r.Consistency, r.Clients, r.ValueSize, r.Keys, r.Seed)
	fmt.Fprintf(w, "%d ops in %.2fs: %.0f ops/s, %d errors\n", r.Ops, r.DurationSeconds, r.OpsPerSecond, r.Errors)
	printLatency(w, "latency", r.Latency)
	if r.Reads != nil {
		fmt.Fprintf(w, "reads:  %d ops, %.0f ops/s\n", r.Reads.Ops, r.Reads.OpsPerSecond)
		printLatency(w, "  latency", r.Reads.Latency)
		fmt.Fprintf(w, "writes: %d ops, %.0f ops/s\n", r.Writes.Ops, r.Writes.OpsPerSecond)
		printLatency(w, "  latency", r.Writes.Latency)
	}
	printErrors(w, r.ErrorsByCode)
}
