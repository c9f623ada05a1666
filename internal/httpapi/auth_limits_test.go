package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
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

// loginFrom attempts a login from the loopback address local and returns
// the status, the Retry-After header and the reply.
func loginFrom(t *testing.T, ctx context.Context, base, local, user, password string) (int, string, string) {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	defer client.CloseIdleConnections()
	body := fmt.Sprintf(`{"user":%q,"password":%q}`, user, password)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/auth/login", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(reply)
}

// TestLoginRateLimit: password checks are limited per user name and per
// source address: over either, 429 with Retry-After before any password
// is checked, while another user from another address logs in.
func TestLoginRateLimit(t *testing.T) {
	const burst = 6 // and no refill during the test
	c := testcluster.New(t, 1, testcluster.Options{Auth: server.AuthConfig{LoginRate: 0.0001, LoginBurst: burst}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0)) // 4 logins from 127.0.0.1, one per user
	for i := 0; i < burst-1; i++ {
		if status, _, reply := loginFrom(t, ctx, f.base, "127.0.0.2", "writer", "wrong"); status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d %s", i, status, reply)
		}
	}
	status, retry, reply := loginFrom(t, ctx, f.base, "127.0.0.3", "writer", "writer-pw")
	if status != http.StatusTooManyRequests || retry == "" || !strings.Contains(reply, `user \"writer\"`) {
		t.Errorf("the writer over its limit, from a fresh address: %d Retry-After %q %s", status, retry, reply)
	}
	if status, _, reply := loginFrom(t, ctx, f.base, "127.0.0.3", "reader", "reader-pw"); status != http.StatusOK {
		t.Errorf("another user from another address: %d %s", status, reply)
	}
	for i := 0; i < 2; i++ { // 127.0.0.1 reaches its burst
		if status, _, reply := loginFrom(t, ctx, f.base, "127.0.0.1", "other", "other-pw"); status != http.StatusOK {
			t.Fatalf("login %d from 127.0.0.1: %d %s", i, status, reply)
		}
	}
	status, retry, reply = loginFrom(t, ctx, f.base, "127.0.0.1", "root", "root-pw")
	if status != http.StatusTooManyRequests || retry == "" || !strings.Contains(reply, "from 127.0.0.1") {
		t.Errorf("a fresh user from an address over its limit: %d Retry-After %q %s", status, retry, reply)
	}
}

// TestUserWatchCap: a user's watches on a member are capped over all its
// sessions (429); cancelling one makes room; another user is not
// affected.
func TestUserWatchCap(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Auth: server.AuthConfig{MaxUserWatches: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	srv := c.Nodes[0].Server
	openSession := func(token string) uint64 {
		id, _ := sessionWithStream(t, ctx, srv, token)
		return id
	}
	watch := func(token string, session uint64, path string) (string, error) {
		w, err := srv.Watch(server.WithCredentials(ctx, server.Credentials{Token: token}), session, server.WatchRequest{Path: path})
		return w.WatchID, err
	}
	first, second := openSession(f.reader), openSession(f.reader)
	var ids []string
	for i, s := range []uint64{first, first, second} {
		id, err := watch(f.reader, s, fmt.Sprintf("/app/w%d", i))
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	if _, err := watch(f.reader, second, "/app/w3"); api.CodeOf(err) != api.CodeOverloaded {
		t.Fatalf("a fourth watch over two sessions: %v, want overloaded", err)
	}
	if _, err := watch(f.writer, openSession(f.writer), "/app/w3"); err != nil {
		t.Errorf("another user's watch: %v", err)
	}
	cancelled, _ := api.ParseID(ids[0])
	if err := srv.CancelWatch(first, cancelled); err != nil {
		t.Fatal(err)
	}
	if _, err := watch(f.reader, second, "/app/w3"); err != nil {
		t.Errorf("a watch after cancelling one: %v", err)
	}
}
