package recipes_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/fencing"
)

// write is one write attempt as the protected resource saw it.
type write struct {
	writeRequest
	Token  uint64 // from the Latch-Fencing-Token header
	Status int    // what the resource answered
	// Stamp is the logical time (resource.clock) at which the write was
	// applied or refused: tests that run holders in this process take
	// stamps from the same clock to order their own steps against writes.
	Stamp int64
}

// resource is the storage a lock protects: an HTTP server in the test
// process that keeps one value (the last write applied) and logs every
// write it applied or refused. Guarded, it sits behind fencing.Middleware
// with an in-memory Guard; unguarded, it applies whatever comes.
type resource struct {
	URL   string
	clock *atomic.Int64

	mu       sync.Mutex // guards the fields below
	accepted []write    // applied, in the order applied
	refused  []write    // refused by the guard, in order
	changed  chan struct{}
}

// fencedResource names the one resource the middleware guards.
const fencedResource = "R"

// newResource starts a resource server, closed at cleanup. clock may be
// nil when the test takes no stamps of its own.
func newResource(t *testing.T, guarded bool, clock *atomic.Int64) *resource {
	t.Helper()
	if clock == nil {
		clock = new(atomic.Int64)
	}
	res := &resource{clock: clock, changed: make(chan struct{})}
	var handler http.Handler = http.HandlerFunc(res.apply)
	if guarded {
		handler = fencing.Middleware(fencing.NewMemory(), func(*http.Request) string { return fencedResource }, handler)
	}
	server := httptest.NewServer(res.logRefusals(handler))
	t.Cleanup(server.Close)
	res.URL = server.URL + "/r"
	return res
}

// apply applies a write: the resource's value becomes it. Behind the
// middleware it runs under the middleware's per-resource lock; res.mu
// serializes it without one.
func (res *resource) apply(w http.ResponseWriter, r *http.Request) {
	var req writeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token, _ := strconv.ParseUint(r.Header.Get(api.HeaderFencingToken), 10, 64)
	res.mu.Lock()
	res.accepted = append(res.accepted, write{writeRequest: req, Token: token, Status: http.StatusOK, Stamp: res.clock.Add(1)})
	res.notifyLocked()
	res.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// logRefusals records the writes next answers with an error.
func (res *resource) logRefusals(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		recorder := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(recorder, r)
		if recorder.status < 300 {
			return
		}
		var req writeRequest
		_ = json.Unmarshal(body, &req)
		token, _ := strconv.ParseUint(r.Header.Get(api.HeaderFencingToken), 10, 64)
		res.mu.Lock()
		res.refused = append(res.refused, write{writeRequest: req, Token: token, Status: recorder.status, Stamp: res.clock.Add(1)})
		res.notifyLocked()
		res.mu.Unlock()
	})
}

func (res *resource) notifyLocked() {
	close(res.changed)
	res.changed = make(chan struct{})
}

// Accepted returns a copy of the applied writes, in order.
func (res *resource) Accepted() []write {
	res.mu.Lock()
	defer res.mu.Unlock()
	return append([]write(nil), res.accepted...)
}

// Value returns the resource's value: the last write applied.
func (res *resource) Value() (write, bool) {
	res.mu.Lock()
	defer res.mu.Unlock()
	if len(res.accepted) == 0 {
		return write{}, false
	}
	return res.accepted[len(res.accepted)-1], true
}

// waitFor returns the first write, applied or refused, that match accepts,
// waiting up to timeout for it; it fails the test on timeout.
func (res *resource) waitFor(t *testing.T, timeout time.Duration, what string, match func(write) bool) write {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		res.mu.Lock()
		changed := res.changed
		for _, list := range [][]write{res.accepted, res.refused} {
			for _, w := range list {
				if match(w) {
					res.mu.Unlock()
					return w
				}
			}
		}
		res.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("resource: no write %s within %v", what, timeout)
		}
	}
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}
