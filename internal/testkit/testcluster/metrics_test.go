package testcluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// sample is one series of a /metrics scrape.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is a parsed /metrics page: its samples and the names with help.
type scrape struct {
	samples []sample
	help    map[string]string
}

// scrapeMetrics reads and parses base's /metrics (the text format).
func scrapeMetrics(t *testing.T, ctx context.Context, base string) scrape {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: status %d: %s", base, resp.StatusCode, body)
	}
	out := scrape{help: map[string]string{}}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			out.help[name] = help
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("scrape %s: %v", base, err)
		}
		out.samples = append(out.samples, s)
	}
	if err := lines.Err(); err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	return out
}

// parseSample parses `name{k="v",...} value` (label values here hold no
// escaped quotes or commas).
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	series, value, found := strings.Cut(line, " ")
	if !found {
		return s, fmt.Errorf("no value in %q", line)
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return s, fmt.Errorf("value of %q: %w", line, err)
	}
	s.value = v
	name, labels, hasLabels := strings.Cut(series, "{")
	s.name = name
	if hasLabels {
		for pair := range strings.SplitSeq(strings.TrimSuffix(labels, "}"), ",") {
			k, quoted, _ := strings.Cut(pair, "=")
			s.labels[k] = strings.Trim(quoted, `"`)
		}
	}
	return s, nil
}

// value returns the sum of the series named name whose labels include
// labels (given as k, v pairs), and whether there was any.
func (sc scrape) value(name string, labels ...string) (float64, bool) {
	total, found := 0.0, false
next:
	for _, s := range sc.samples {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		total, found = total+s.value, true
	}
	return total, found
}

// TestMetricsAfterTraffic scrapes real members' /metrics after sessions
// (created, closed, expired), node reads and writes, a watch that fires on
// its stream, a registration refused for want of a stream, and requests of
// unknown endpoints, and checks that the session, watch, stream and HTTP
// series exist with the values the traffic implies, labelled by route
// pattern (never a raw path).
//
// It runs in virtual time: the expiring session expires once its timeout
// has passed on the clock.
func TestMetricsAfterTraffic(t *testing.T) {
	c := New(t, 3, virtualSteady(Options{}))
	ctx := ctxT(t, 90*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	n, o := c.Others(leader)[0], c.Others(leader)[1]
	at := c.URL(n)

	live := createSession(t, ctx, at, 60*time.Second).SessionID
	closed := createSession(t, ctx, at, 60*time.Second).SessionID
	expiring := createSession(t, ctx, at, 2*time.Second).SessionID
	if err := Do(ctx, http.MethodPost, at, "/v1/session/close", nil, api.SessionRequest{SessionID: closed}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := Put(ctx, at, fmt.Sprintf("/metered/k%d", i), "v", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := Get(ctx, at, fmt.Sprintf("/metered/k%d", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Get(ctx, at, "/metered/missing", ""); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("get of a missing node: %v", err)
	}
	if err := Do(ctx, http.MethodGet, at, "/no/such/endpoint", nil, nil, nil); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("unknown endpoint: %v", err)
	}
	if _, err := SessionInfo(ctx, at, live, "", 0); err != nil {
		t.Fatal(err)
	}

	stream := openStream(t, at, live)
	w, err := AddWatch(ctx, at, api.WatchRequest{Path: "/metered/k0", SessionID: live, Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddWatch(ctx, c.URL(o), api.WatchRequest{Path: "/metered/k0", SessionID: live}); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("registration without a stream on %s: %v", c.Nodes[o].Name, err)
	}
	if _, err := Put(ctx, c.URL(leader), "/metered/k0", "fire", ""); err != nil {
		t.Fatal(err)
	}
	if ev, ok := stream.Next(10 * time.Second); !ok || ev.WatchID != w.WatchID {
		t.Fatalf("event %+v (ok %v), want one of watch %s", ev, ok, w.WatchID)
	}
	c.Advance(2 * time.Second) // its timeout: no expiry can come sooner, so no scrape until then
	if !c.AdvanceUntil(30*time.Second, func() bool {
		v, _ := scrapeMetrics(t, ctx, at).value("latch_sessions_expired_total")
		return v == 1
	}) {
		t.Fatalf("session %s with a 2s timeout not counted as expired on %s within 30s", expiring, c.Nodes[n].Name)
	}

	sc := scrapeMetrics(t, ctx, at)
	expect := func(sc scrape, want float64, name string, labels ...string) {
		t.Helper()
		if got, ok := sc.value(name, labels...); !ok || got != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
	}
	atLeast := func(sc scrape, want float64, name string, labels ...string) {
		t.Helper()
		if got, ok := sc.value(name, labels...); !ok || got < want {
			t.Errorf("%s%v = %v (present %v), want at least %v", name, labels, got, ok, want)
		}
	}
	expect(sc, 3, "latch_sessions_created_total")
	expect(sc, 1, "latch_sessions_closed_total")
	expect(sc, 1, "latch_sessions_expired_total")
	expect(sc, 1, "latch_sessions_live")
	expect(sc, 1, "latch_watches_registered")
	expect(sc, 1, "latch_watch_registrations_total")
	expect(sc, 0, "latch_watch_registrations_refused_total", "reason", "no_stream")
	expect(sc, 0, "latch_watches_dropped_total")
	expect(sc, 1, "latch_watch_events_fired_total")
	expect(sc, 1, "latch_watch_events_delivered_total")
	expect(sc, 0, "latch_watch_events_queued")
	expect(sc, 1, "latch_event_streams_open")
	// The WAL's counts: the writes above were flushed (each flush one
	// fsync, carrying at least one save of at least one group), every save
	// and entry in some flush.
	flushes, _ := sc.value("latch_wal_flushes_total")
	saves, _ := sc.value("latch_wal_flushed_saves_total")
	groups, _ := sc.value("latch_wal_flushed_groups_total")
	entries, _ := sc.value("latch_wal_flushed_entries_total")
	if flushes < 1 || saves < flushes || groups < flushes || groups > saves || entries < 3 {
		t.Errorf("WAL flush counts: %v flushes, %v saves, %v groups, %v entries: want flushes >= 1, saves and groups >= flushes, groups <= saves, entries >= 3",
			flushes, saves, groups, entries)
	}
	// The Ready loop's batching: the writes above took Readys and stepped
	// their proposals (or, on a follower, the leader's appends).
	atLeast(sc, 1, "latch_raft_readys_total", "shard", "0")
	atLeast(sc, 3, "latch_raft_messages_stepped_total", "shard", "0")
	kv := "/v1/kv/{path...}"
	expect(sc, 3, "latch_http_requests_total", "method", "PUT", "route", kv, "code", "200")
	atLeast(sc, 3, "latch_http_requests_total", "method", "GET", "route", kv, "code", "200")
	expect(sc, 1, "latch_http_requests_total", "method", "GET", "route", kv, "code", "404")
	expect(sc, 1, "latch_http_requests_total", "method", "GET", "route", "unmatched", "code", "404")
	expect(sc, 3, "latch_http_requests_total", "method", "POST", "route", "/v1/session/create", "code", "200")
	expect(sc, 1, "latch_http_requests_total", "method", "POST", "route", "/v1/watch", "code", "200")
	expect(sc, 1, "latch_http_requests_total", "method", "GET", "route", "/v1/session/{id}", "code", "200")
	expect(sc, 3, "latch_http_request_duration_seconds_count", "method", "PUT", "route", kv)
	if sum, _ := sc.value("latch_http_request_duration_seconds_sum", "method", "PUT", "route", kv); sum <= 0 {
		t.Errorf("PUT latency sum %v, want > 0", sum)
	}
	// The stream is open: not counted yet, and never timed.
	if v, _ := sc.value("latch_http_requests_total", "route", "/v1/session/{id}/events"); v != 0 {
		t.Errorf("the open event stream was counted as %v finished requests", v)
	}

	refusing := scrapeMetrics(t, ctx, c.URL(o))
	expect(refusing, 1, "latch_watch_registrations_refused_total", "reason", "no_stream")
	expect(refusing, 1, "latch_http_requests_total", "method", "POST", "route", "/v1/watch", "code", "409")
	expect(refusing, 0, "latch_event_streams_open")
	expect(refusing, 3, "latch_sessions_created_total") // applied on every member

	stream.Close()
	if !WaitFor(10*time.Second, func() bool {
		v, _ := scrapeMetrics(t, ctx, at).value("latch_event_streams_open")
		return v == 0
	}) {
		t.Fatal("latch_event_streams_open did not drop to 0 within 10s of the client closing its stream")
	}
	if !WaitFor(10*time.Second, func() bool {
		v, _ := scrapeMetrics(t, ctx, at).value("latch_http_requests_total", "method", "GET", "route", "/v1/session/{id}/events", "code", "200")
		return v == 1
	}) {
		t.Fatal("the ended event stream was not counted as one GET /v1/session/{id}/events request")
	}
	sc = scrapeMetrics(t, ctx, at)
	if _, timed := sc.value("latch_http_request_duration_seconds_count", "route", "/v1/session/{id}/events"); timed {
		t.Error("an event stream's whole life was recorded as a request latency")
	}
	for _, s := range sc.samples {
		for k, v := range s.labels {
			if strings.Contains(v, "/metered") || strings.Contains(v, live) || strings.Contains(v, "/no/such") {
				t.Errorf("%s has a raw path or id as its %s label: %q", s.name, k, v)
			}
		}
	}
	for _, name := range []string{"latch_sessions_live", "latch_sessions_created_total", "latch_sessions_closed_total",
		"latch_sessions_expired_total", "latch_watches_registered", "latch_watch_registrations_total",
		"latch_watch_registrations_refused_total", "latch_watches_dropped_total", "latch_watch_sessions_disconnected_total",
		"latch_watch_events_fired_total", "latch_watch_events_delivered_total", "latch_watch_events_queued",
		"latch_event_streams_open", "latch_http_requests_total", "latch_http_request_duration_seconds"} {
		if sc.help[name] == "" {
			t.Errorf("%s has no help text", name)
		}
	}
}
