package faulthttp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// backend is a stand-in member: it counts what reaches it, answers JSON
// naming its own URL, and streams events on /v1/session/{id}/events until
// the test sends on events or the client leaves.
type backend struct {
	*httptest.Server
	hits   atomic.Int64
	events chan string
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	b := &backend{events: make(chan string, 16)}
	b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	b.hits.Add(1)
	if strings.HasSuffix(r.URL.Path, "/events") {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case data := <-b.events:
				fmt.Fprintf(w, "data: %s\n\n", data)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "self": b.URL})
}

func newProxy(t *testing.T, b *backend) *Proxy {
	t.Helper()
	p, err := New("n1", b.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// call sends one request through p and returns the status and body.
func call(ctx context.Context, method, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(`{"value":"x"}`))
	if err != nil {
		return 0, "", err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name       string
		fault      Fault
		method     string
		wantStatus int
		wantBody   string // substring
		wantHits   int64  // requests that reached the backend
		wantErr    bool   // the connection fails
	}{
		{"reply with a leader hint", Fault{Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeUnavailable, Message: "m", LeaderHint: "http://hint"}},
			"GET", http.StatusServiceUnavailable, `"leader_hint":"http://hint"`, 0, false},
		{"reply 429", Fault{Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeOverloaded}}, "GET", http.StatusTooManyRequests, "overloaded", 0, false},
		{"reply 410 to a method only", Fault{Method: "PUT", Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeSessionExpired}},
			"PUT", http.StatusGone, "session_expired", 0, false},
		{"other method passes", Fault{Method: "PUT", Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeSessionExpired}},
			"GET", http.StatusOK, "/v1/kv/a", 1, false},
		{"other path passes", Fault{Path: "/v1/watch", Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeOverloaded}},
			"GET", http.StatusOK, "/v1/kv/a", 1, false},
		{"path prefix", Fault{Path: "/v1/kv/*", Times: 1, Kind: Reply, Err: api.Error{Code: api.CodeOverloaded}},
			"GET", http.StatusTooManyRequests, "overloaded", 0, false},
		{"lose the reply", Fault{Times: 1, Kind: LoseReply}, "PUT", http.StatusServiceUnavailable, "reply lost", 1, false},
		{"delay", Fault{Times: 1, Kind: Delay, Delay: 20 * time.Millisecond}, "GET", http.StatusOK, "/v1/kv/a", 1, false},
		{"drop", Fault{Times: 1, Kind: Drop}, "GET", 0, "", 0, true},
		{"forward then drop", Fault{Times: 1, Kind: ForwardThenDrop}, "PUT", 0, "", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t)
			p := newProxy(t, b)
			p.Inject(tt.fault)
			start := time.Now()
			status, body, err := call(context.Background(), tt.method, p.URL()+"/v1/kv/a")
			if took := time.Since(start); took < tt.fault.Delay {
				t.Fatalf("call answered after %v, before the fault's delay %v", took, tt.fault.Delay)
			}
			if tt.wantErr != (err != nil) {
				t.Fatalf("call = %d %q, %v; want an error: %v", status, body, err, tt.wantErr)
			}
			if !tt.wantErr && (status != tt.wantStatus || !strings.Contains(body, tt.wantBody)) {
				t.Fatalf("call = %d %q, want %d ~%q", status, body, tt.wantStatus, tt.wantBody)
			}
			if got := b.hits.Load(); got != tt.wantHits {
				t.Fatalf("backend saw %d requests, want %d", got, tt.wantHits)
			}
			// The fault is spent (Times 1): the next request is forwarded.
			if status, body, err := call(context.Background(), tt.method, p.URL()+"/v1/kv/a"); err != nil || status != http.StatusOK {
				t.Fatalf("second call = %d %q, %v; want it forwarded", status, body, err)
			}
			if got := b.hits.Load(); got != tt.wantHits+1 {
				t.Fatalf("backend saw %d requests after the second call, want %d", got, tt.wantHits+1)
			}
			if got := p.Count("", "/v1/kv/*"); got != 2 {
				t.Fatalf("Count = %d, want 2", got)
			}
		})
	}
}

func TestHangWaitsForTheClient(t *testing.T) {
	p := newProxy(t, newBackend(t))
	p.SetHang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := call(ctx, "GET", p.URL()+"/v1/kv/a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call through a hanging proxy = %v, want the deadline", err)
	}
	p.SetHang(false)
	if status, _, err := call(context.Background(), "GET", p.URL()+"/v1/kv/a"); err != nil || status != http.StatusOK {
		t.Fatalf("after SetHang(false): %d, %v", status, err)
	}
}

func TestStopRefusesConnections(t *testing.T) {
	p := newProxy(t, newBackend(t))
	p.Stop()
	if _, _, err := call(context.Background(), "GET", p.URL()+"/v1/kv/a"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("call to a stopped proxy = %v, want connection refused", err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if status, _, err := call(context.Background(), "GET", p.URL()+"/v1/kv/a"); err != nil || status != http.StatusOK {
		t.Fatalf("after Start: %d, %v", status, err)
	}
}

// TestRecordsAndRewrites: the log holds each request's body, status and
// JSON reply, and replies name the proxy instead of the member.
func TestRecordsAndRewrites(t *testing.T) {
	b := newBackend(t)
	p := newProxy(t, b)
	p.setRewrite(strings.NewReplacer(b.URL, p.URL()))
	status, body, err := call(context.Background(), "PUT", p.URL()+"/v1/kv/a?x=1")
	if err != nil || status != http.StatusOK || !strings.Contains(body, p.URL()) || strings.Contains(body, b.URL) {
		t.Fatalf("call = %d %q, %v; want the proxy's URL in place of the member's", status, body, err)
	}
	reqs := p.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests logged, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != "PUT" || r.Path != "/v1/kv/a" || r.Query.Get("x") != "1" || string(r.Body) != `{"value":"x"}` ||
		r.Status != http.StatusOK || !strings.Contains(string(r.Reply), p.URL()) {
		t.Fatalf("logged %+v", r)
	}
}

// TestCutStreams: a cut stream ends with the end frame and nothing sent
// after the cut reaches the client.
func TestCutStreams(t *testing.T) {
	b := newBackend(t)
	p := newProxy(t, b)
	resp, err := http.Get(p.URL() + "/v1/session/0x1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	b.events <- `{"n":1}`
	if !lines.Scan() || lines.Text() != `data: {"n":1}` {
		t.Fatalf("first line %q, %v", lines.Text(), lines.Err())
	}
	if p.OpenStreams() != 1 {
		t.Fatalf("OpenStreams = %d, want 1", p.OpenStreams())
	}
	p.CutStreams("slow consumer")
	b.events <- `{"n":2}`
	var rest []string
	for lines.Scan() {
		if lines.Text() != "" {
			rest = append(rest, lines.Text())
		}
	}
	want := []string{"event: end", `data: {"reason":"slow consumer"}`}
	if strings.Join(rest, "|") != strings.Join(want, "|") {
		t.Fatalf("after the cut the client read %q, want %q", rest, want)
	}
}
