package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/loadgen"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestBenchServerFigures runs session-bench and lock-bench against real
// servers, whose /metrics the reports read.
func TestBenchServerFigures(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	c.WaitLeader(10 * time.Second)
	env := map[string]string{EnvEndpoints: strings.Join(c.URLs(), ",")}

	t.Run("session-bench", func(t *testing.T) {
		const sessions = 40
		got := latchctl(t, env, "", "session-bench", "-o", "json", "--sessions", "40", "--batch", "15",
			"--session-timeout", "5s", "--interval", "100ms", "--duration", "500ms")
		if got.code != ExitOK {
			t.Fatalf("session-bench = %+v", got)
		}
		var r loadgen.SessionBenchResult
		decode(t, got.stdout, &r)
		if r.Created != sessions || len(r.CreateErrors) != 0 || r.CreatesPerSecond <= 0 || r.TimeoutMs != 5000 {
			t.Fatalf("creation: %+v", r)
		}
		// 3 batches (15, 15 and 10 ids) at offsets 0, 33 and 67ms of every
		// 100ms for 500ms: the first batch is sent 6 times, the others 5.
		if r.HeartbeatCalls != 16 || r.HeartbeatIDs != 6*15+5*15+5*10 || len(r.HeartbeatErrors) != 0 ||
			r.SpuriousExpiries != 0 || r.HeartbeatLatency.P50 <= 0 || r.HeartbeatLatency.P50 > r.HeartbeatLatency.Max {
			t.Fatalf("heartbeats: %+v", r)
		}
		if len(r.Creation) != 3 || len(r.Heartbeating) != 3 {
			t.Fatalf("server figures: creation %+v, heartbeat phase %+v", r.Creation, r.Heartbeating)
		}
		for _, d := range r.Creation {
			if d.AppliedDelta < sessions || d.Role == "" {
				t.Errorf("creation on %s: %+v, want at least one entry a session", d.Endpoint, d)
			}
		}
	})

	t.Run("lock-bench", func(t *testing.T) {
		got := latchctl(t, env, "", "lock-bench", "-o", "json", "--duration", "300ms", "--clients", "2")
		if got.code != ExitOK {
			t.Fatalf("lock-bench = %+v", got)
		}
		var r loadgen.LockBenchResult
		decode(t, got.stdout, &r)
		if r.Cycles == 0 || r.Errors != 0 || r.MetricsError != "" || len(r.Nodes) != 3 || r.EntriesPerCycle < 2 {
			t.Fatalf("lock-bench report: %+v", r)
		}
	})
}
