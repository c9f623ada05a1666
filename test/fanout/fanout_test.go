// Package fanout measures watch fan-out on real latchd processes: one key
// watched by 10,000 watchers, from a write's acknowledgement to the last
// notification delivered, with the watchers spread over the three members
// and all on one member; and server memory per watch. It is a figure, not a
// pass/fail test: it runs only with LATCH_FIGURES=1.
package fanout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

const hotKey = "/fanout/hot"

func TestMain(m *testing.M) { proccluster.RunTests(m) }

// TestWatchFanout: LATCH_FIGURES=1 [LATCH_WATCHERS=10000] go test -run TestWatchFanout -v -timeout 20m ./test/fanout
//
// With LATCH_FANOUT_PROFILE=DIR the members run with --enable-pprof, and
// during the writes a CPU profile of every member (LATCH_FANOUT_PROFILE_SECONDS
// long, default 8) and one of this test process (the watchers' side) are
// written to DIR, with each member's live heap as the watches left it (a
// collection forced before the writes); see profiles_test.go.
func TestWatchFanout(t *testing.T) {
	if os.Getenv("LATCH_FIGURES") == "" {
		t.Skip("a measurement, not a test: LATCH_FIGURES=1 go test -run TestWatchFanout -v ./test/fanout")
	}
	watchers := watcherCount()
	for _, spread := range []bool{true, false} {
		t.Run(name(spread), func(t *testing.T) { measure(t, watchers, spread) })
	}
}

// name names a case by where its watchers are.
func name(spread bool) string {
	if spread {
		return "spread over 3 members"
	}
	return "all on one member"
}

// watcherCount is LATCH_WATCHERS, by default 10,000.
func watcherCount() int {
	if n, err := strconv.Atoi(os.Getenv("LATCH_WATCHERS")); err == nil && n > 0 {
		return n
	}
	return 10000
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}}

// startCluster starts the three members a fan-out runs on (with their
// ZooKeeper ports if zkPort, with pprof if LATCH_FANOUT_PROFILE is set) and
// writes the hot key's first value through the leader, whose index it
// returns. One member may hold every watcher beside the test's other
// connections: more than --max-connections' default of 4,096.
func startCluster(t *testing.T, ctx context.Context, watchers int, zkPort bool) (*proccluster.Cluster, int) {
	t.Helper()
	opts := proccluster.Options{Nodes: 3, Tick: 100 * time.Millisecond, LogLevel: "error", ZK: zkPort,
		ExtraFlags: []string{"--max-connections", strconv.Itoa(max(4096, watchers+1024))}}
	if os.Getenv("LATCH_FANOUT_PROFILE") != "" {
		opts.ExtraFlags = append(opts.ExtraFlags, "--enable-pprof")
	}
	c := proccluster.Start(t, opts)
	leader := c.WaitLeader(20 * time.Second)
	if err := testcluster.Do(ctx, "PUT", c.URLs()[leader], "/v1/kv"+hotKey, nil, api.PutRequest{Value: "0"}, nil); err != nil {
		t.Fatal(err)
	}
	return c, leader
}

func measure(t *testing.T, watchers int, spread bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, leader := startCluster(t, ctx, watchers, false)
	urls := c.URLs()
	home := func(i int) string {
		if spread {
			return urls[i%len(urls)]
		}
		return urls[(leader+1)%len(urls)] // one follower takes every watcher
	}
	rssBefore := rss(t, urls)
	start := time.Now()
	sessions := createSessions(t, ctx, urls, watchers)
	t.Logf("created %d sessions in %v", watchers, time.Since(start).Round(time.Millisecond))

	arrivals := newArrivals()
	start = time.Now()
	var wg sync.WaitGroup
	streams := make(chan struct{}, watchers)
	failed := make(chan struct{}, watchers) // a watcher that could not register
	for i, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !watchAndRead(ctx, t, home(i), id, arrivals, streams) {
				failed <- struct{}{}
			}
		}()
	}
	for range watchers {
		select {
		case <-streams:
		case <-failed:
			cancel()
			wg.Wait()
			t.Fatal("a watcher could not register")
		case <-ctx.Done():
			t.Fatal("watchers did not all register")
		}
	}
	t.Logf("%d watches registered and streams open in %v", watchers, time.Since(start).Round(time.Millisecond))
	rssAfter := rss(t, urls)

	const writes = 20
	t.Logf("load average before the writes: %s", loadAverage())
	settleWatchers()
	// After the profiles start: with LATCH_FANOUT_PROFILE each member
	// collects once for its heap profile, before the writes.
	profiles := startProfiles(t, os.Getenv("LATCH_FANOUT_PROFILE"), map[bool]string{true: "spread", false: "one"}[spread], urls)
	gcs := countCollections(t, urls)
	meter := meterOf(c)
	membersCPU, selfCPU := meter.read(t)
	// Commit happens between a write's sending and its acknowledgement, and
	// followers may notify before the leader's reply arrives: latencies are
	// measured from the sending, an upper bound of commit-to-notification.
	acked := map[uint64]time.Time{}
	for i := range writes {
		var n api.Node
		sent := time.Now()
		if err := testcluster.Do(ctx, "PUT", urls[leader], "/v1/kv"+hotKey, nil, api.PutRequest{Value: strconv.Itoa(i + 1)}, &n); err != nil {
			t.Fatal(err)
		}
		acked[n.Index] = sent
		// Paced: the next write waits for this one's fan-out to finish, so
		// each is measured alone (a fan-out that never finishes is reported
		// below).
		testcluster.WaitFor(time.Minute, func() bool { return arrivals.count(n.Index) >= watchers })
	}
	meter.logPer(t, name(spread), membersCPU, selfCPU, writes*watchers)
	gcs.log(t, name(spread))
	profiles.stop()
	t.Logf("load average after the writes: %s", loadAverage())
	if !arrivals.waitAll(acked, watchers, time.Minute) {
		t.Errorf("not every watcher got every write within a minute: %s", arrivals.missing(acked, watchers))
	}
	cancel()
	wg.Wait()
	report(t, acked, arrivals, watchers, name(spread), rssBefore, rssAfter)
}

// createSessions creates n sessions with a timeout long enough for the run.
func createSessions(t *testing.T, ctx context.Context, urls []string, n int) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed sync.Once
	sem := make(chan struct{}, 128)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var s api.Session
			if err := testcluster.Do(ctx, "POST", urls[i%len(urls)], "/v1/session/create", nil, api.SessionCreateRequest{TimeoutMs: 60000}, &s); err != nil {
				failed.Do(func() { t.Errorf("create session: %v", err) })
				return
			}
			ids[i] = s.SessionID
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// registering bounds the watch registrations in flight, so that they need
// few connections beside the streams (a member holds every stream in the
// "all on one member" case).
var registering = make(chan struct{}, 128)

// watchAndRead registers a persistent watch on the hot key for session id
// at base, opens the session's stream there, signals ready, and records the
// arrival of each event until ctx ends. It returns false, at once, if it
// could not open the stream or register the watch.
func watchAndRead(ctx context.Context, t *testing.T, base, id string, arrivals *arrivals, ready chan<- struct{}) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/session/"+id+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("open stream: %v", err)
		return false
	}
	defer resp.Body.Close()
	// The stream opens with a comment: read it first, as a client that
	// waits for its stream to be live does.
	scanner := bufio.NewScanner(resp.Body)
	if !scanner.Scan() || scanner.Text() != ": open" {
		t.Errorf("open stream: first line %q, %v; want \": open\"", scanner.Text(), scanner.Err())
		return false
	}
	registering <- struct{}{}
	err = testcluster.Do(ctx, "POST", base, "/v1/watch", nil, api.WatchRequest{Path: hotKey, SessionID: id, Persistent: true}, nil)
	<-registering
	if err != nil {
		t.Errorf("watch: %v", err)
		return false
	}
	ready <- struct{}{}
	// Each line is decoded in place, into the two fields the test reads:
	// the watchers share the two cores with the members they measure.
	var ev struct {
		Path  string `json:"path"`
		Index uint64 `json:"index"`
	}
	for scanner.Scan() {
		line, ok := bytes.CutPrefix(scanner.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		ev.Path, ev.Index = "", 0
		if json.Unmarshal(line, &ev) == nil && ev.Path == hotKey {
			arrivals.record(ev.Index, time.Now())
		}
	}
	return true
}

// arrivals collects when each write's notifications arrived. Ten thousand
// watchers record at once, so nothing they share is one lock: each write's
// count is an atomic counter, and the times go to one of arrivalStripes
// maps, picked by the arrival's number.
type arrivals struct {
	counts sync.Map // write index -> *atomic.Int64: notifications arrived
	stripe [arrivalStripes]arrivalStripe
}

const arrivalStripes = 64

type arrivalStripe struct {
	mu sync.Mutex
	at map[uint64][]time.Time // guarded by mu
	_  [40]byte               // a cache line of its own
}

func newArrivals() *arrivals {
	a := &arrivals{}
	for i := range a.stripe {
		a.stripe[i].at = map[uint64][]time.Time{}
	}
	return a
}

func (a *arrivals) counter(index uint64) *atomic.Int64 {
	if c, ok := a.counts.Load(index); ok {
		return c.(*atomic.Int64)
	}
	c, _ := a.counts.LoadOrStore(index, new(atomic.Int64))
	return c.(*atomic.Int64)
}

func (a *arrivals) record(index uint64, when time.Time) {
	s := &a.stripe[a.counter(index).Add(1)%arrivalStripes]
	s.mu.Lock()
	s.at[index] = append(s.at[index], when)
	s.mu.Unlock()
}

// count returns how many notifications of index arrived.
func (a *arrivals) count(index uint64) int { return int(a.counter(index).Load()) }

// times returns when the notifications of index arrived, in no order.
func (a *arrivals) times(index uint64) []time.Time {
	var out []time.Time
	for i := range a.stripe {
		s := &a.stripe[i]
		s.mu.Lock()
		out = append(out, s.at[index]...)
		s.mu.Unlock()
	}
	return out
}

// waitAll waits until every watcher got every acknowledged write.
func (a *arrivals) waitAll(acked map[uint64]time.Time, watchers int, timeout time.Duration) bool {
	return testcluster.WaitFor(timeout, func() bool {
		for index := range acked {
			if a.count(index) < watchers {
				return false
			}
		}
		return true
	})
}

func (a *arrivals) missing(acked map[uint64]time.Time, watchers int) string {
	var out []string
	for index := range acked {
		if n := a.count(index); n < watchers {
			out = append(out, fmt.Sprintf("index %d: %d of %d", index, n, watchers))
		}
	}
	return strings.Join(out, ", ")
}

// report logs, for the case named name, the time from each write's sending
// to its last notification (p50/p99 over writes) and every notification's
// latency.
func report(t *testing.T, acked map[uint64]time.Time, a *arrivals, watchers int, name string, before, after []float64) {
	var last, all []time.Duration
	var inOrder []string // each write's last notification, in write order
	for _, index := range slices.Sorted(maps.Keys(acked)) {
		ack, times := acked[index], a.times(index)
		if len(times) == 0 {
			continue
		}
		latest := slices.MaxFunc(times, func(x, y time.Time) int { return x.Compare(y) })
		last = append(last, latest.Sub(ack))
		inOrder = append(inOrder, latest.Sub(ack).Round(time.Millisecond).String())
		for _, at := range times {
			all = append(all, at.Sub(ack))
		}
	}
	t.Logf("%s: last notification of each write, in order: %s", name, strings.Join(inOrder, " "))
	var memory []string
	for i := range before {
		memory = append(memory, fmt.Sprintf("%.0f B", (after[i]-before[i])/float64(watchers)))
	}
	t.Logf("%d watchers (%s): write sent -> last notification p50 %v p99 %v; every notification p50 %v p99 %v; server RSS per session+watch+stream %s",
		watchers, name,
		pct(last, 50), pct(last, 99), pct(all, 50), pct(all, 99), strings.Join(memory, ", "))
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)].Round(100 * time.Microsecond)
}

var (
	rssLine = regexp.MustCompile(`(?m)^process_resident_memory_bytes (\S+)$`)
	gcLine  = regexp.MustCompile(`(?m)^go_gc_duration_seconds_count (\S+)$`)
)

// rss reads every member's resident memory from /metrics.
func rss(t *testing.T, urls []string) []float64 { return metric(t, urls, rssLine) }

// metric reads, from every member's /metrics, the value line matches.
func metric(t *testing.T, urls []string, line *regexp.Regexp) []float64 {
	out := make([]float64, len(urls))
	for i, u := range urls {
		resp, err := client.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := line.FindSubmatch(body); m != nil {
			out[i], _ = strconv.ParseFloat(string(m[1]), 64)
		}
	}
	return out
}

// collections counts the garbage collections of the members and of this
// process (the watchers) over the writes of a fan-out.
type collections struct {
	urls    []string
	members []float64
	self    uint32
}

// settleWatchers collects this process's garbage once the watchers are
// registered. The 10,000 watchers of a
// fan-out are one process here (a fleet's are 10,000 hosts, each with its
// own small heap): their registration leaves it a heap of some 200 MB
// whose collection, left to the runtime, starts as the writes do and takes
// the two cores' time from the first fan-out (a 276 ms mark in a run traced
// with GODEBUG=gctrace=1). The members are not collected here: a
// collection of theirs during the writes is latch's cost, and counted
// (countCollections).
func settleWatchers() { runtime.GC() }

// countCollections starts counting the collections of the members at urls
// and of this process.
func countCollections(t *testing.T, urls []string) *collections {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return &collections{urls: urls, members: metric(t, urls, gcLine), self: m.NumGC}
}

// log reports the collections since countCollections.
func (c *collections) log(t *testing.T, what string) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	now := metric(t, c.urls, gcLine)
	var members []string
	for i := range now {
		members = append(members, strconv.FormatFloat(now[i]-c.members[i], 'f', 0, 64))
	}
	t.Logf("%s: garbage collections during the writes: members %s; watchers' process %d",
		what, strings.Join(members, ", "), m.NumGC-c.self)
}
