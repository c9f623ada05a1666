package loadgen

// What the benchmark commands (bench, session-bench, lock-bench) share: the
// cluster under load and its connection pool, the timed run of the workers,
// the latency and error figures and how they are printed, the CPU profile of
// the load generator.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/loadgen/latency"
)

// UsageError is a run the load generator refuses: a configuration it cannot
// use (a flag's value) or an endpoint it cannot parse. latchctl reports it
// as a usage error.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the refused value's error.
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error { return &UsageError{fmt.Errorf(format, args...)} }

// benchTarget is the cluster a benchmark loads: how to reach it, and the
// one connection pool that every client of the run shares.
type benchTarget struct {
	conn      client.Config
	transport *http.Transport
}

func newBenchTarget(conn client.Config) *benchTarget {
	return &benchTarget{conn: conn, transport: client.NewTransport(conn)}
}

// newClient returns a client of the target over the shared pool; a bad
// endpoint is a usage error.
func (t *benchTarget) newClient() (*client.Client, error) {
	cfg := t.conn
	cfg.Transport = t.transport
	c, err := client.New(cfg)
	if err != nil {
		return nil, &UsageError{err}
	}
	return c, nil
}

// httpClient returns a plain HTTP client over the shared pool, for what
// the benchmarks ask the servers directly.
func (t *benchTarget) httpClient() *http.Client {
	return &http.Client{Transport: t.transport, Timeout: 30 * time.Second}
}

// close closes the pool's idle connections.
func (t *benchTarget) close() { t.transport.CloseIdleConnections() }

// runTimed runs work(stop, i) for i in [0, n), each on a goroutine of its
// own, and returns once every one has returned, with the time from the
// start until then. stop ends after d, or earlier with ctx: a work loops
// until stop ends, and passes stop to the calls that the end should cut
// short.
func runTimed(ctx context.Context, d time.Duration, n int, work func(stop context.Context, i int)) time.Duration {
	stop, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	started := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { work(stop, i) })
	}
	wg.Wait()
	return time.Since(started)
}

// sleepUntil returns at the time at, or earlier when ctx ends.
func sleepUntil(ctx context.Context, at time.Time) {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// LatencySummary is in milliseconds.
type LatencySummary struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

func summarize(h *latency.Histogram) LatencySummary {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return LatencySummary{P50: ms(h.Quantile(0.5)), P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)),
		Max: ms(h.Max()), Mean: ms(h.Mean())}
}

func printLatency(w io.Writer, label string, l LatencySummary) {
	fmt.Fprintf(w, "%s: p50 %.3fms  p99 %.3fms  p99.9 %.3fms  max %.3fms  mean %.3fms\n",
		label, l.P50, l.P99, l.P999, l.Max, l.Mean)
}

// tallyErrors adds a worker's error counts into byCode and returns how many
// it added.
func tallyErrors(byCode map[string]uint64, worker map[api.Code]uint64) uint64 {
	var total uint64
	for code, n := range worker {
		byCode[string(code)] += n
		total += n
	}
	return total
}

// printErrors writes one line per error code, in the order of the codes.
func printErrors(w io.Writer, byCode map[string]uint64) {
	codes := make([]string, 0, len(byCode))
	for code := range byCode {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		fmt.Fprintf(w, "  error %s: %d\n", code, byCode[code])
	}
}

// Profiled runs run under a CPU profile written to path (none when empty).
func Profiled[Result any](path string, run func() (Result, error)) (Result, error) {
	stop, err := startCPUProfile(path)
	if err != nil {
		var none Result
		return none, err
	}
	defer stop()
	return run()
}

// startCPUProfile starts a pprof CPU profile into path (none when empty)
// and returns its stop.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		_ = file.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = file.Close()
	}, nil
}
