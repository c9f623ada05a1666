package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/loadgen"
)

func TestLockBench(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 2)
	tests := []struct {
		name  string
		locks string
	}{
		{name: "one lock", locks: "1"},
		{name: "a lock each", locks: "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := latchctl(t, env, "", "lock-bench", "-o", "json", "--duration", "300ms", "--clients", "4", "--locks", tt.locks)
			var r loadgen.LockBenchResult
			if got.code != ExitOK || json.Unmarshal([]byte(got.stdout), &r) != nil {
				t.Fatalf("lock-bench = %+v", got)
			}
			if r.Cycles == 0 || r.Errors != 0 || r.CyclesPerSecond <= 0 || r.Acquire.P50 <= 0 ||
				r.Acquire.P50 > r.Acquire.P99 || r.Acquire.P99 > r.Acquire.Max || r.Release.P50 <= 0 {
				t.Fatalf("implausible report: %+v", r)
			}
		})
	}
	text := latchctl(t, env, "", "lock-bench", "--duration", "100ms", "--clients", "2")
	if text.code != ExitOK || !strings.Contains(text.stdout, "cycles/s") || !strings.Contains(text.stdout, "acquire: p50") {
		t.Fatalf("text report = %+v", text)
	}
	if got := latchctl(t, env, "", "lock-bench", "--locks", "0"); got.code != ExitOther {
		t.Fatalf("lock-bench --locks 0 = %+v, want usage error", got)
	}
}
