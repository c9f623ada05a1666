package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// heartbeatCounter is a transport that counts heartbeat calls by form and,
// when refuseBatches is set, answers every batched one with 400 as a server
// without batching would. An attempt that failed in a way the client retries
// (no reply, 503, 429: a loaded member) is not counted: its retry is the
// same call. It is counted as it is sent and uncounted when it fails, before
// its retry goes out, so once a member answered a call the counts hold it.
type heartbeatCounter struct {
	next          http.RoundTripper
	refuseBatches bool

	mu      sync.Mutex // guards the counts
	batched int
	single  int
}

func (h *heartbeatCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/v1/session/heartbeat" || r.Body == nil {
		return h.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	batched := strings.Contains(string(body), `"session_ids"`)
	h.mu.Lock()
	if batched {
		h.batched++
	} else {
		h.single++
	}
	h.mu.Unlock()
	if batched && h.refuseBatches {
		return &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{}, Request: r,
			Body: io.NopCloser(strings.NewReader(`{"error":{"code":"invalid_argument","message":"unknown field session_ids"}}`))}, nil
	}
	resp, err := h.next.RoundTrip(r)
	if err != nil || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
		h.mu.Lock()
		if batched {
			h.batched--
		} else {
			h.single--
		}
		h.mu.Unlock()
	}
	return resp, err
}

func (h *heartbeatCounter) counts() (batched, single int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.batched, h.single
}

// TestKeepaliveBatches: one client's sessions of one timeout share one
// heartbeat per interval, in calls of at most maxHeartbeatBatch ids; a
// session reported expired in a batch ends alone; a server refusing
// batches gets one call per id.
func TestKeepaliveBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		refuseBatches bool
		sessions      int
		wantBatched   int // calls per beat
		wantSingle    int
	}{
		{"one session, single form", false, 1, 0, 1},
		{"many sessions, batched", false, 2*maxHeartbeatBatch + 5, 3, 0},
		{"server refuses batches", true, 5, 1, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := newCluster(t, 1)
			clk := newFakeClock()
			counter := &heartbeatCounter{next: NewTransport(Config{}), refuseBatches: tt.refuseBatches}
			c, err := newClient(Config{Endpoints: cluster.URLs(), Transport: counter, BackoffBase: time.Millisecond,
				BackoffMax: 10 * time.Millisecond, RequestTimeout: 5 * time.Second}, clk, func(int) int { return 0 })
			if err != nil {
				t.Fatal(err)
			}
			sessions := newSessions(t, c, tt.sessions)
			interval := sessions[0].Timeout() / 3
			for beat := 1; beat <= 2; beat++ {
				if got := waitForTimer(t, clk); got > interval {
					t.Fatalf("beat %d: the group waits %v, more than the interval %v", beat, got, interval)
				}
				clk.Advance(interval)
				waitFor(t, "every session's heartbeat", func() bool {
					for _, s := range sessions {
						if cluster.Heartbeats(s.ID()) < beat {
							return false
						}
					}
					return true
				})
				if batched, single := counter.counts(); batched != beat*tt.wantBatched || single != beat*tt.wantSingle {
					t.Fatalf("after beat %d: %d batched and %d single calls, want %d and %d",
						beat, batched, single, beat*tt.wantBatched, beat*tt.wantSingle)
				}
			}
			if len(sessions) < 2 {
				return
			}
			cluster.Expire(sessions[1].ID())
			clk.Advance(waitForTimer(t, clk))
			select {
			case <-sessions[1].Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the expired session did not end")
			}
			if err := sessions[1].Err(); !isCode(err, api.CodeSessionExpired) {
				t.Fatalf("expired session: Err = %v", err)
			}
			for i, s := range sessions {
				if i != 1 && s.Err() != nil {
					t.Fatalf("session %d ended with its batch-mate: %v", i, s.Err())
				}
			}
		})
	}
}

// newSessions creates n sessions of c, several at a time (each is a write
// the members commit), orphaned at the end of the test.
func newSessions(t *testing.T, c *Client, n int) []*Session {
	t.Helper()
	sessions := make([]*Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sessions[i], errs[i] = c.NewSession(context.Background(), 3*time.Second)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, s := range sessions {
		if s != nil {
			t.Cleanup(s.Orphan)
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return sessions
}
