package recipes_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// holderSessionTimeout is the session timeout of the paused holder A.
const holderSessionTimeout = 2 * time.Second

// exitLost is latchctl's exit code when the lock was lost while its
// command ran (cli.ExitLost).
const exitLost = 124

// TestCanonicalPausedHolder plays docs/design.md's paused-holder timeline
// with real processes. Holder A is 'latchctl lock R --session-timeout 2s --
// writer': it acquires (token tA) and its writer writes once. The test
// stops A's whole process group (SIGSTOP: latchctl and the writer), and B,
// a lock in this process, acquires once A's session expired (token tB >
// tA) and writes. While A is still stopped the test orders one more write
// from A's writer (a file, and a SIGUSR1 to look at it), then resumes the
// group (SIGCONT): the writer makes that write with tA on the SIGUSR1, or
// on latchctl's SIGTERM if that reaches it first, before it exits.
//
// Guarded, that stale write is refused with 409 and B's write stays the
// resource's value; unguarded, the same stale write is applied after B's:
// the double write that only the fencing guard prevents. Either way
// latchctl then notices the loss and exits 124.
func TestCanonicalPausedHolder(t *testing.T) {
	latchctl := proccluster.BuildLatchctl(t)
	cluster := startCluster(t)
	c := newClient(t, cluster.URLs(), nil)
	tests := []struct {
		name       string
		guarded    bool
		wantStatus int // what A's stale write gets
	}{
		{name: "guard refuses the stale holder", guarded: true, wantStatus: http.StatusConflict},
		{name: "without guard the stale write lands", guarded: false, wantStatus: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := newResource(t, tt.guarded, nil)
			lockName := "canonical-guarded"
			if !tt.guarded {
				lockName = "canonical-unguarded"
			}
			orders := filepath.Join(t.TempDir(), "orders")
			holderA := startGroup(t, "holder A", writerEnvironment("A", res.URL, orders),
				latchctl, "--endpoints", endpointsFlag(cluster), "lock", lockName,
				"--session-timeout", holderSessionTimeout.String(), "--", self(t))
			first := res.waitFor(t, 20*time.Second, "from A at start", func(w write) bool { return w.Writer == "A" })
			if first.Status != http.StatusOK {
				t.Fatalf("A's first write: status %d, want 200", first.Status)
			}
			tokenA := first.Token

			holderA.signal(t, syscall.SIGSTOP)
			paused := time.Now()
			lockB := recipe.NewLock(newSession(t, c, 5*time.Second), lockName)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tokenB, err := lockB.Acquire(ctx)
			if err != nil {
				t.Fatalf("B acquire while A is stopped: %v", err)
			}
			t.Logf("A holds with token %d; stopped; B acquired with token %d after %v", tokenA, tokenB, time.Since(paused).Round(time.Millisecond))
			if tokenB <= tokenA {
				t.Fatalf("B's token %d is not above A's %d", tokenB, tokenA)
			}
			if status, err := postWriteToken(res.URL, writeRequest{Writer: "B", Seq: 1, What: "after acquire"}, tokenB); err != nil || status != http.StatusOK {
				t.Fatalf("B's write: status %d, %v", status, err)
			}

			// The stale write: ordered while A is stopped, made as soon as it runs.
			if err := os.WriteFile(orders, nil, 0o600); err != nil {
				t.Fatalf("order A's stale write: %v", err)
			}
			if err := syscall.Kill(first.PID, syscall.SIGUSR1); err != nil {
				t.Fatalf("SIGUSR1 to A's writer %d: %v", first.PID, err)
			}
			holderA.signal(t, syscall.SIGCONT)
			stale := res.waitFor(t, 10*time.Second, "from A after SIGCONT", func(w write) bool { return w.Writer == "A" && w.What == "signal" })
			if stale.Token != tokenA || stale.Status != tt.wantStatus {
				t.Fatalf("A's write after resuming: token %d status %d, want token %d status %d", stale.Token, stale.Status, tokenA, tt.wantStatus)
			}
			checkValueAfterStaleWrite(t, res, tt.guarded, tokenA, tokenB)

			if code := holderA.waitExit(t, 15*time.Second); code != exitLost {
				t.Fatalf("latchctl A exited %d, want %d (lock lost); output:\n%s", code, exitLost, holderA.output.String())
			}
			if status, err := postWriteToken(res.URL, writeRequest{Writer: "B", Seq: 2, What: "after A exited"}, tokenB); err != nil || status != http.StatusOK {
				t.Fatalf("B's second write: status %d, %v", status, err)
			}
			if err := lockB.Release(ctx); err != nil {
				t.Fatalf("B release: %v", err)
			}
		})
	}
}

// checkValueAfterStaleWrite checks the resource right after A's stale
// write: guarded, B's write stands and tokens never went down; unguarded,
// A's stale write overwrote B's (the anomaly the guard exists for).
func checkValueAfterStaleWrite(t *testing.T, res *resource, guarded bool, tokenA, tokenB uint64) {
	t.Helper()
	value, _ := res.Value()
	decreased := false
	accepted := res.Accepted()
	for i := 1; i < len(accepted); i++ {
		if accepted[i].Token < accepted[i-1].Token {
			decreased = true
		}
	}
	if guarded {
		if value.Writer != "B" || value.Token != tokenB || decreased {
			t.Fatalf("guarded resource: value %+v (want B's, token %d), accepted tokens decreased: %v; log %+v", value, tokenB, decreased, accepted)
		}
		return
	}
	if value.Writer != "A" || value.Token != tokenA || !decreased {
		t.Fatalf("unguarded resource: value %+v, want A's stale write (token %d) applied after B's; log %+v", value, tokenA, accepted)
	}
	t.Logf("unguarded: stale token %d applied after token %d: double write, as the design predicts", tokenA, tokenB)
}
