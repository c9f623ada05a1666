package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// TestLearnerFigures measures docs/benchmarks.md "Learners": read
// throughput (stale, linearizable), watch fan-out and write latency with 3
// voters, then with 3 voters + 2 learners. It runs only with
// LATCH_FIGURES=1 (it takes about 2 minutes and wants a quiet machine):
//
//	LATCH_FIGURES=1 go test -run TestLearnerFigures -v -timeout 10m ./test/membership
//
// Loads come from the latchctl binary (`latchctl bench`); the exact command
// lines are logged. Figures are printed, not asserted.
func TestLearnerFigures(t *testing.T) {
	if os.Getenv("LATCH_FIGURES") == "" {
		t.Skip("figures: set LATCH_FIGURES=1 to measure (about 2 minutes)")
	}
	latchctl := proccluster.BuildLatchctl(t)
	c := proccluster.Start(t, proccluster.Options{Nodes: 3})
	c.WaitLeader(20 * time.Second)
	voters := c.URLs()
	t.Logf("load average before: %s", loadAverage())
	without := measureCase(t, latchctl, voters, voters)

	var initial []string
	for _, m := range c.Members {
		initial = append(initial, m.Name+"="+m.PeerAddr)
	}
	admin, err := client.New(client.Config{Endpoints: voters})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var all []string
	all = append(all, voters...)
	for _, name := range []string{"o1", "o2"} {
		j := newJoiner(t, name)
		if _, err := admin.AddMember(t.Context(), client.AddMemberRequest{Name: name, PeerURL: j.peerAddr, ClientURL: j.clientURL, Learner: true}); err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
		j.start(t, proccluster.Build(t), strings.Join(initial, ","), "--tick", "50ms", "--log-level", "warn")
		waitApplied(t, j.clientURL, status(t, voters[0]).CommitIndex, 30*time.Second)
		all = append(all, j.clientURL)
	}
	with := measureCase(t, latchctl, voters, all)
	t.Logf("load average after: %s", loadAverage())
	t.Logf("\n| figure | 3 voters | 3 voters + 2 learners |\n| --- | --- | --- |\n%s", table(without, with))
}

// figures are one case's results, keyed by figure name.
type figures map[string]string

// measureCase runs the loads: writes through the voters, reads and watches
// spread over readers.
func measureCase(t *testing.T, latchctl string, voters, readers []string) figures {
	out := figures{}
	put := bench(t, latchctl, voters, "--op", "put", "--clients", "16")
	out["write p50 / p99 (put, 16 clients, through the voters)"] = fmt.Sprintf("%.1f / %.1f ms (%.0f ops/s)", put.Latency.P50, put.Latency.P99, put.OpsPerSecond)
	for _, consistency := range []string{"stale", "linearizable"} {
		get := bench(t, latchctl, readers, "--op", "get", "--consistency", consistency, "--clients", "64")
		out["read "+consistency+" (64 clients over every member)"] = fmt.Sprintf("%.0f ops/s (p99 %.1f ms)", get.OpsPerSecond, get.Latency.P99)
	}
	fan := watchFanout(t, voters, readers, 500, 100)
	out["watch fan-out (500 watchers over every member, 100 writes)"] = fan
	return out
}

// benchResult is the part of `latchctl bench -o json` used here.
type benchResult struct {
	OpsPerSecond float64 `json:"ops_per_s"`
	Latency      struct {
		P50 float64 `json:"p50_ms"`
		P99 float64 `json:"p99_ms"`
	} `json:"latency"`
}

func bench(t *testing.T, latchctl string, endpoints []string, args ...string) benchResult {
	t.Helper()
	full := append([]string{"bench", "--endpoints", strings.Join(endpoints, ","), "--duration", "10s", "-o", "json"}, args...)
	t.Logf("latchctl %s", strings.Join(full, " "))
	raw, err := exec.Command(latchctl, full...).Output()
	if err != nil {
		t.Fatalf("latchctl bench: %v", err)
	}
	var res benchResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("bench output %q: %v", raw, err)
	}
	return res
}

// watchFanout opens watchers sessions spread over readers, each with a
// persistent watch on one key, writes it writes times through the voters,
// and reports deliveries per second and the delivery latency (write sent
// to event received) p50/p99.
func watchFanout(t *testing.T, voters, readers []string, watchers, writes int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := fmt.Sprintf("/fan/k%d", time.Now().UnixNano())
	var (
		mu        sync.Mutex // guards received
		received  []time.Duration
		sentAt    sync.Map // version -> time.Time its write was sent
		delivered sync.WaitGroup
	)
	var sessions []*client.Session
	defer func() {
		for _, s := range sessions {
			_ = s.Close(context.Background())
		}
	}()
	for i := range watchers {
		c, err := client.New(client.Config{Endpoints: []string{readers[i%len(readers)]}, NotifyJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.NewSession(ctx, 10*time.Second)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		sessions = append(sessions, s)
		w, err := s.Watch(ctx, key, client.Persistent())
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		delivered.Add(1)
		go func() {
			defer delivered.Done()
			for {
				select {
				case ev := <-w.Events():
					now := time.Now()
					if sent, ok := sentAt.Load(ev.Version); ok && !ev.Resync {
						mu.Lock()
						received = append(received, now.Sub(sent.(time.Time)))
						mu.Unlock()
					}
					if ev.Version >= uint64(writes) {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	writer, err := client.New(client.Config{Endpoints: voters})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	start := time.Now()
	for i := range writes {
		sentAt.Store(uint64(i+1), time.Now()) // the key is fresh: write i creates version i+1
		if _, err := writer.Put(ctx, key, fmt.Sprint(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	delivered.Wait()
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(received)
	if len(received) == 0 {
		return "no deliveries"
	}
	p := func(q float64) time.Duration { return received[min(len(received)-1, int(q*float64(len(received))))] }
	return fmt.Sprintf("%d of %d delivered, %.0f events/s, latency p50 %.1f ms p99 %.1f ms",
		len(received), watchers*writes, float64(len(received))/elapsed.Seconds(),
		float64(p(0.50).Microseconds())/1000, float64(p(0.99).Microseconds())/1000)
}

func table(without, with figures) string {
	var names []string
	for name := range without {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, without[name], with[name])
	}
	return b.String()
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
