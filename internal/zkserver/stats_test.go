package zkserver

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// TestLatencySummary: min and max in whole milliseconds, the average as a
// Java double, zeros before the first request.
func TestLatencySummary(t *testing.T) {
	l := newLatencies()
	if minMs, maxMs, avg := l.summary(); minMs != 0 || maxMs != 0 || avg != "0.0" {
		t.Fatalf("empty summary = %d/%s/%d, want 0/0.0/0", minMs, avg, maxMs)
	}
	now := time.Now()
	l.record(now.Add(-1500 * time.Microsecond))
	l.record(now.Add(-3500 * time.Microsecond))
	minMs, maxMs, avg := l.summary()
	if minMs != 1 || maxMs < 3 {
		t.Fatalf("min/max = %d/%d ms, want 1 and at least 3", minMs, maxMs)
	}
	if v, err := strconv.ParseFloat(avg, 64); err != nil || v < 2.5 || v > 2.5+float64(time.Since(now).Milliseconds())+1 {
		t.Fatalf("avg = %q, want about 2.5", avg)
	}
	whole := newLatencies()
	whole.count.Store(2)
	whole.sumUs.Store(4000)
	if _, _, avg := whole.summary(); avg != "2.0" {
		t.Fatalf("avg of 2 ms = %q, want 2.0", avg)
	}
}

var srvrLatency = regexp.MustCompile(`(?m)^Latency min/avg/max: (\d+)/(\d+\.\d+)/(\d+)$`)

// TestFourLetterWordsReportRequests: srvr, stat and mntr report the
// requests answered (latency) and those in flight (Outstanding, queued,
// zk_outstanding_requests), not constant zeros.
func TestFourLetterWordsReportRequests(t *testing.T) {
	c := startZK(t, 1, Config{FourLetterWords: []string{"srvr", "stat", "mntr"}})
	addr, l := c.addrs[0], c.listeners[0]
	r := dialRaw(t, addr)
	r.session()
	for range 5 {
		if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/"}); h.Err != 0 {
			t.Fatalf("exists / = %v", h.Err)
		}
	}
	srvr := fourLetterWord(t, addr, "srvr")
	m := srvrLatency.FindStringSubmatch(srvr)
	if m == nil {
		t.Fatalf("srvr has no latency line: %q", srvr)
	}
	minMs, _ := strconv.Atoi(m[1])
	avg, _ := strconv.ParseFloat(m[2], 64)
	maxMs, _ := strconv.Atoi(m[3])
	if minMs > maxMs || avg < float64(minMs) || avg > float64(maxMs+1) {
		t.Fatalf("srvr latency %q: want min <= avg <= max", m[0])
	}
	if n := l.latencies.count.Load(); n < 5 {
		t.Fatalf("latencies counted %d requests, want at least the 5 answered", n)
	}
	if !strings.Contains(srvr, "Outstanding: 0\n") {
		t.Fatalf("srvr at rest: %q", srvr)
	}

	// A read held in flight shows in Outstanding, queued and mntr.
	release := make(chan struct{})
	hold := func() { <-release }
	l.beforeRead.Store(&hold)
	r.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/"})
	if !testcluster.WaitFor(10*time.Second, func() bool { return l.outstanding() == 1 }) {
		t.Fatalf("outstanding = %d with one read held, want 1", l.outstanding())
	}
	if srvr := fourLetterWord(t, addr, "srvr"); !strings.Contains(srvr, "Outstanding: 1\n") {
		t.Fatalf("srvr with a read held: %q", srvr)
	}
	if stat := fourLetterWord(t, addr, "stat"); !strings.Contains(stat, "(queued=1,") {
		t.Fatalf("stat with a read held: %q", stat)
	}
	mntr := fourLetterWord(t, addr, "mntr")
	if !strings.Contains(mntr, "zk_outstanding_requests\t1\n") || !regexp.MustCompile(`(?m)^zk_avg_latency\t\d+\.\d+`).MatchString(mntr) {
		t.Fatalf("mntr with a read held: %q", mntr)
	}
	l.beforeRead.Store(nil)
	close(release)
	if h, _ := r.reply(); h.Err != 0 {
		t.Fatalf("getData / = %v", h.Err)
	}
	if !testcluster.WaitFor(10*time.Second, func() bool { return l.outstanding() == 0 }) {
		t.Fatalf("outstanding = %d after the reply, want 0", l.outstanding())
	}
}
