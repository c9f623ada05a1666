package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// p99 returns the 99th percentile of samples.
func p99(samples []time.Duration) time.Duration {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return sorted[len(sorted)*99/100]
}

// timedReads reads /app/x n times as token and returns each latency,
// failing the test on any answer but 200.
func timedReads(t *testing.T, ctx context.Context, base, token string, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if status, reply := sendAs(t, ctx, token, "GET", base+"/v1/kv/app/x", ""); status != http.StatusOK {
			t.Fatalf("a quiet user's read: %d %s", status, reply)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// TestUserRateLimitIsolatesUsers floods latch as one user from 8
// goroutines while another user reads: the flooding user gets 429 with
// Retry-After, the other never does, and the other's p99 stays within 2x
// of its quiet value plus a slack for a loaded machine (the ratio is
// logged).
func TestUserRateLimitIsolatesUsers(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Auth: server.AuthConfig{UserRate: 200, UserBurst: 200}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	quiet := p99(timedReads(t, ctx, f.base, f.reader, 200))

	var limited, retryAfter atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/v1/kv/app/x", nil)
				req.Header.Set("Authorization", "Bearer "+f.writer)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					limited.Add(1)
					if resp.Header.Get("Retry-After") != "" {
						retryAfter.Add(1)
					}
				}
			}
		}()
	}
	if !testcluster.WaitFor(30*time.Second, func() bool { return limited.Load() > 100 }) {
		t.Fatal("the flooding user was never limited")
	}
	flooded := p99(timedReads(t, ctx, f.base, f.reader, 200))
	close(stop)
	wg.Wait()
	if retryAfter.Load() != limited.Load() {
		t.Errorf("%d of %d 429s carried Retry-After", retryAfter.Load(), limited.Load())
	}
	// Generous: 2x plus 200ms of slack for a loaded machine; starvation (a
	// quiet user queued behind the flood) would cost seconds.
	if flooded > 2*quiet+200*time.Millisecond {
		t.Errorf("the quiet user's p99 went from %v to %v under another user's flood", quiet, flooded)
	}
	t.Logf("quiet user's p99: %v alone, %v while another user floods (ratio %.2f); %d requests of the flood refused",
		quiet, flooded, float64(flooded)/float64(quiet), limited.Load())
}

// TestUserSessionCap: a user at its cap of sessions gets 429; another user
// still creates one; closing one makes room.
func TestUserSessionCap(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Auth: server.AuthConfig{MaxUserSessions: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0)) // the writer holds one session
	create := `{"timeout_ms":60000}`
	mustOK(t, ctx, f.writer, "POST", f.base+"/v1/session/create", create)
	status, reply := sendAs(t, ctx, f.writer, "POST", f.base+"/v1/session/create", create)
	if status != http.StatusTooManyRequests {
		t.Fatalf("a third session: %d %s", status, reply)
	}
	mustOK(t, ctx, f.reader, "POST", f.base+"/v1/session/create", create)
	mustOK(t, ctx, f.writer, "POST", f.base+"/v1/session/close", `{"session_id":"`+f.writerSession+`"}`)
	mustOK(t, ctx, f.writer, "POST", f.base+"/v1/session/create", create)
}
