package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
)

// serverSampler reads every endpoint's role and resource figures from its
// /v1/status and /metrics, between the phases of session-bench and around
// the run of lock-bench.
type serverSampler struct {
	http      *http.Client
	endpoints []string
}

// nodeSample is one server's /metrics and role at one moment.
type nodeSample struct {
	Endpoint     string  `json:"endpoint"`
	Role         string  `json:"role"`
	AppliedIndex uint64  `json:"applied_index"`
	RSSBytes     float64 `json:"rss_bytes"`
	HeapBytes    float64 `json:"heap_inuse_bytes"`
	CPUSeconds   float64 `json:"cpu_seconds"`
}

// NodeDelta is a server's change over a phase.
type NodeDelta struct {
	Endpoint      string  `json:"endpoint"`
	Role          string  `json:"role"`
	AppliedDelta  int64   `json:"applied_index_delta"`
	RSSBeforeMiB  float64 `json:"rss_before_mib"`
	RSSAfterMiB   float64 `json:"rss_after_mib"`
	HeapAfterMiB  float64 `json:"heap_inuse_after_mib"`
	HeapPerSess   float64 `json:"heap_bytes_per_session,omitempty"`
	CPUPercent    float64 `json:"cpu_percent"` // of one core, averaged over the phase
	BytesPerSess  float64 `json:"rss_bytes_per_session,omitempty"`
	PhaseSeconds  float64 `json:"phase_s"`
	CPUSecondsUse float64 `json:"cpu_seconds"`
}

// sample reads every endpoint's role and metrics, once every endpoint has
// applied the same index (or after settleTimeout), so that the applied index
// deltas of consecutive phases do not borrow entries from each other.
func (b *serverSampler) sample(ctx context.Context) ([]nodeSample, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		out, err := b.sampleAll(ctx)
		if err != nil || settled(out) || time.Now().After(deadline) {
			return out, err
		}
		sleepUntil(ctx, time.Now().Add(50*time.Millisecond))
	}
}

// settleTimeout bounds the wait for the endpoints to apply the same index.
const settleTimeout = 10 * time.Second

func settled(samples []nodeSample) bool {
	for _, s := range samples {
		if s.AppliedIndex != samples[0].AppliedIndex {
			return false
		}
	}
	return true
}

func (b *serverSampler) sampleAll(ctx context.Context) ([]nodeSample, error) {
	out := make([]nodeSample, len(b.endpoints))
	for i, endpoint := range b.endpoints {
		s, err := b.sampleOne(ctx, endpoint)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", endpoint, err)
		}
		out[i] = s
	}
	return out, nil
}

func (b *serverSampler) sampleOne(ctx context.Context, endpoint string) (nodeSample, error) {
	s := nodeSample{Endpoint: endpoint}
	var status api.Status
	if err := b.get(ctx, endpoint+"/v1/status", func(r io.Reader) error { return json.NewDecoder(r).Decode(&status) }); err != nil {
		return s, err
	}
	s.Role = status.Role
	metrics := map[string]float64{}
	if err := b.get(ctx, endpoint+"/metrics", func(r io.Reader) error { return readMetrics(r, metrics) }); err != nil {
		return s, err
	}
	s.AppliedIndex = uint64(metrics["latch_raft_applied_index"])
	s.RSSBytes = metrics["process_resident_memory_bytes"]
	s.CPUSeconds = metrics["process_cpu_seconds_total"]
	s.HeapBytes = metrics["go_memstats_heap_inuse_bytes"]
	return s, nil
}

func (b *serverSampler) get(ctx context.Context, u string, decode func(io.Reader) error) error {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	response, err := b.http.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, response.StatusCode)
	}
	return decode(response.Body)
}

// readMetrics reads the samples of a Prometheus text exposition by name:
// the samples of a labelled series add up under its name (the per-shard
// latch_raft_applied_index sums to the entries applied over every shard).
func readMetrics(r io.Reader, into map[string]float64) error {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := cutSample(line)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			into[name] += v
		}
	}
	return scanner.Err()
}

// cutSample splits a sample line into its series (name and labels) and
// value; label values may hold spaces, so the series ends at its "}".
func cutSample(line string) (series, value string, ok bool) {
	if end := strings.LastIndex(line, "}"); end >= 0 {
		return line[:end+1], line[end+1:], true
	}
	return strings.Cut(line, " ")
}

// deltas compares two samples per endpoint over a phase of seconds;
// sessions > 0 adds the resident bytes per session.
func deltas(before, after []nodeSample, seconds float64, sessions int) []NodeDelta {
	out := make([]NodeDelta, len(after))
	for i := range after {
		d := NodeDelta{
			Endpoint: after[i].Endpoint, Role: after[i].Role,
			AppliedDelta: int64(after[i].AppliedIndex) - int64(before[i].AppliedIndex),
			RSSBeforeMiB: before[i].RSSBytes / (1 << 20), RSSAfterMiB: after[i].RSSBytes / (1 << 20),
			HeapAfterMiB:  after[i].HeapBytes / (1 << 20),
			CPUSecondsUse: after[i].CPUSeconds - before[i].CPUSeconds, PhaseSeconds: seconds,
		}
		d.CPUPercent = 100 * d.CPUSecondsUse / max(seconds, 1e-9)
		if sessions > 0 {
			d.BytesPerSess = (after[i].RSSBytes - before[i].RSSBytes) / float64(sessions)
			d.HeapPerSess = (after[i].HeapBytes - before[i].HeapBytes) / float64(sessions)
		}
		out[i] = d
	}
	return out
}

func printDeltas(w io.Writer, phase string, list []NodeDelta) {
	for _, d := range list {
		fmt.Fprintf(w, "  %s %s %-9s applied +%d, RSS %.1f -> %.1f MiB", phase, d.Endpoint, d.Role,
			d.AppliedDelta, d.RSSBeforeMiB, d.RSSAfterMiB)
		if d.BytesPerSess != 0 {
			fmt.Fprintf(w, " (%.0f B/session; Go heap in use %.1f MiB, %.0f B/session)", d.BytesPerSess, d.HeapAfterMiB, d.HeapPerSess)
		}
		fmt.Fprintf(w, ", CPU %.1fs = %.1f%% of a core\n", d.CPUSecondsUse, d.CPUPercent)
	}
}
