package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/loadgen/latency"
)

// 'latchctl session-bench' measures what a fleet of sessions costs a
// cluster: it creates --sessions sessions (--concurrency requests in flight,
// at most --rate a second), keeps them alive with batched heartbeats
// (session_ids, --batch ids a call, spread evenly over each --interval and
// over every endpoint, so followers relay most of them) for --duration, and
// reports the creation rate, heartbeat latency, spurious expiries (sessions
// a heartbeat reported expired), and from each server's /metrics the raft
// applied index delta over the heartbeat phase (heartbeats write nothing to
// the log, so it stays ~0) and the process's resident memory and CPU.
// It speaks HTTP directly (not through client.Session) so that it can time
// each call and pace the batches itself.

// SessionBenchConfig is what 'latchctl session-bench' runs.
type SessionBenchConfig struct {
	Sessions    int           `json:"sessions"`
	Rate        float64       `json:"create_rate_target"` // creations a second; 0: unlimited
	Concurrency int           `json:"create_concurrency"`
	Timeout     time.Duration `json:"-"`
	Interval    time.Duration `json:"-"`
	Duration    time.Duration `json:"-"`
	Batch       int           `json:"batch"`
	Close       bool          `json:"close"`
}

// SessionBenchResult is the report of a run.
type SessionBenchResult struct {
	SessionBenchConfig
	TimeoutMs         uint64            `json:"timeout_ms"`
	IntervalSeconds   float64           `json:"interval_s"`
	Created           int               `json:"created"`
	CreateSeconds     float64           `json:"create_s"`
	CreatesPerSecond  float64           `json:"creates_per_s"`
	CreateErrors      map[string]uint64 `json:"create_errors,omitempty"`
	Creation          []NodeDelta       `json:"creation"`
	HeartbeatCalls    uint64            `json:"heartbeat_calls"`
	HeartbeatIDs      uint64            `json:"heartbeat_ids"`
	HeartbeatErrors   map[string]uint64 `json:"heartbeat_errors,omitempty"`
	HeartbeatLatency  LatencySummary    `json:"heartbeat_latency"`
	SpuriousExpiries  int               `json:"spurious_expiries"`
	Heartbeating      []NodeDelta       `json:"heartbeat_phase"`
	HeartbeatDuration float64           `json:"heartbeat_s"`
}

func (cfg *SessionBenchConfig) Validate() error {
	switch {
	case cfg.Sessions < 1 || cfg.Concurrency < 1 || cfg.Batch < 1:
		return usagef("--sessions, --concurrency and --batch must be at least 1")
	case cfg.Rate < 0 || cfg.Interval <= 0 || cfg.Duration <= 0 || cfg.Timeout <= 0:
		return usagef("--rate must not be negative; --interval, --duration and --session-timeout positive")
	}
	return nil
}

// sessionBench holds a run's HTTP client and endpoints.
type sessionBench struct {
	serverSampler
	progress io.Writer
}

func RunSessionBench(ctx context.Context, conn client.Config, cfg SessionBenchConfig, progress io.Writer) (*SessionBenchResult, error) {
	target := newBenchTarget(conn)
	defer target.close()
	b := &sessionBench{serverSampler: serverSampler{http: target.httpClient(), endpoints: conn.Endpoints}, progress: progress}
	result := &SessionBenchResult{SessionBenchConfig: cfg, IntervalSeconds: cfg.Interval.Seconds()}

	before, err := b.sample(ctx)
	if err != nil {
		return nil, fmt.Errorf("session-bench: %w", err)
	}
	ids, err := b.create(ctx, cfg, result)
	if err != nil {
		return nil, err
	}
	created, err := b.sample(ctx)
	if err != nil {
		return nil, fmt.Errorf("session-bench: %w", err)
	}
	result.Creation = deltas(before, created, result.CreateSeconds, len(ids))
	fmt.Fprintf(progress, "session-bench: %d sessions in %.1fs (%.0f/s); heartbeating for %v\n",
		len(ids), result.CreateSeconds, result.CreatesPerSecond, cfg.Duration)

	started := time.Now()
	b.heartbeat(ctx, cfg, ids, result)
	result.HeartbeatDuration = time.Since(started).Seconds()
	after, err := b.sample(ctx)
	if err != nil {
		return nil, fmt.Errorf("session-bench: %w", err)
	}
	result.Heartbeating = deltas(created, after, result.HeartbeatDuration, 0)
	if cfg.Close {
		b.closeAll(ctx, cfg.Concurrency, ids)
	}
	return result, nil
}

// post sends a JSON body to endpoint+path and decodes a 200 reply into out.
func (b *sessionBench) post(ctx context.Context, endpoint, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	request.Header.Set("Content-Type", "application/json")
	response, err := b.http.Do(request)
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "%s: %v", endpoint, err)
	}
	defer response.Body.Close()
	data, err := io.ReadAll(response.Body)
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "%s: %v", endpoint, err)
	}
	if response.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return api.Errorf(api.CodeInternal, "%s: status %d", endpoint, response.StatusCode)
		}
		return &e.Error
	}
	return json.Unmarshal(data, out)
}

// create makes cfg.Sessions sessions with cfg.Concurrency workers paced to
// cfg.Rate, round-robin over the endpoints, and returns their ids.
func (b *sessionBench) create(ctx context.Context, cfg SessionBenchConfig, result *SessionBenchResult) ([]string, error) {
	ids := make([]string, 0, cfg.Sessions)
	var mu sync.Mutex // guards ids, result.CreateErrors and result.TimeoutMs
	result.CreateErrors = map[string]uint64{}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(cfg.Sessions) {
					return
				}
				if cfg.Rate > 0 {
					due := start.Add(time.Duration(float64(k) / cfg.Rate * float64(time.Second)))
					sleepUntil(ctx, due)
				}
				var s api.Session
				err := b.post(ctx, b.endpoints[int(k)%len(b.endpoints)], "/v1/session/create",
					api.SessionCreateRequest{TimeoutMs: uint64(cfg.Timeout.Milliseconds())}, &s)
				mu.Lock()
				if err != nil {
					result.CreateErrors[string(api.CodeOf(err))]++
				} else {
					ids = append(ids, s.SessionID)
					result.TimeoutMs = s.TimeoutMs
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	result.Created = len(ids)
	result.CreateSeconds = elapsed.Seconds()
	result.CreatesPerSecond = float64(len(ids)) / max(elapsed.Seconds(), 1e-9)
	if len(ids) == 0 {
		return nil, fmt.Errorf("session-bench: no session could be created (errors %v)", result.CreateErrors)
	}
	return ids, ctx.Err()
}

// heartbeat keeps ids alive for cfg.Duration: every interval, each batch
// is sent once, batch k at offset k*interval/batches, to endpoint k mod n.
func (b *sessionBench) heartbeat(ctx context.Context, cfg SessionBenchConfig, ids []string, result *SessionBenchResult) {
	var batches [][]string
	for len(ids) > 0 {
		n := min(len(ids), cfg.Batch)
		batches = append(batches, ids[:n])
		ids = ids[n:]
	}
	var mu sync.Mutex // guards the fields below and result's heartbeat fields
	histogram := latency.New()
	expired := map[string]bool{}
	result.HeartbeatErrors = map[string]uint64{}
	phaseStart := time.Now()
	stop := phaseStart.Add(cfg.Duration)
	var wg sync.WaitGroup
	for k, batch := range batches {
		wg.Go(func() {
			endpoint := b.endpoints[k%len(b.endpoints)]
			offset := time.Duration(int64(cfg.Interval) * int64(k) / int64(len(batches)))
			for round := 0; ctx.Err() == nil; round++ {
				due := phaseStart.Add(offset + time.Duration(round)*cfg.Interval)
				if due.After(stop) {
					return
				}
				sleepUntil(ctx, due)
				var reply api.Heartbeat
				sent := time.Now()
				err := b.post(ctx, endpoint, "/v1/session/heartbeat", api.SessionRequest{SessionIDs: batch}, &reply)
				elapsed := time.Since(sent)
				mu.Lock()
				result.HeartbeatCalls++
				if err != nil {
					result.HeartbeatErrors[string(api.CodeOf(err))]++
				} else {
					result.HeartbeatIDs += uint64(len(batch))
					histogram.Record(elapsed)
					for _, id := range reply.Expired {
						expired[id] = true
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	result.HeartbeatLatency = summarize(histogram)
	result.SpuriousExpiries = len(expired)
}

// closeAll closes ids, best effort.
func (b *sessionBench) closeAll(ctx context.Context, workers int, ids []string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(len(ids)) && ctx.Err() == nil; k = next.Add(1) - 1 {
				_ = b.post(ctx, b.endpoints[int(k)%len(b.endpoints)], "/v1/session/close",
					api.SessionRequest{SessionID: ids[k]}, &api.Closed{})
			}
		})
	}
	wg.Wait()
}

func PrintSessionBench(w io.Writer, r *SessionBenchResult) {
	fmt.Fprintf(w, "%d sessions (timeout %dms) created in %.2fs: %.0f/s (target %v, %d in flight), errors %v\n",
		r.Created, r.TimeoutMs, r.CreateSeconds, r.CreatesPerSecond, rateText(r.Rate), r.Concurrency, r.CreateErrors)
	printDeltas(w, "creation", r.Creation)
	fmt.Fprintf(w, "heartbeats every %.1fs for %.0fs: %d calls of <= %d ids, %d ids kept alive, errors %v\n",
		r.IntervalSeconds, r.HeartbeatDuration, r.HeartbeatCalls, r.Batch, r.HeartbeatIDs, r.HeartbeatErrors)
	printLatency(w, "heartbeat latency", r.HeartbeatLatency)
	fmt.Fprintf(w, "spurious expiries: %d\n", r.SpuriousExpiries)
	printDeltas(w, "heartbeat phase", r.Heartbeating)
}

func rateText(rate float64) string {
	if rate == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f/s", rate)
}
