package zkserver

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// latencies are the port's request latencies since it started, as
// ZooKeeper's srvr and mntr report them: from a request's arrival (its
// frame read) to its reply handed to the connection, of every request
// answered. Safe for concurrent use; recording is a few atomic operations.
type latencies struct {
	count atomic.Uint64
	sumUs atomic.Uint64 // microseconds, summed
	minUs atomic.Uint64 // math.MaxUint64 until the first request
	maxUs atomic.Uint64
}

func newLatencies() *latencies {
	l := &latencies{}
	l.minUs.Store(math.MaxUint64)
	return l
}

// record adds one request that arrived at since.
func (l *latencies) record(since time.Time) {
	us := uint64(max(time.Since(since).Microseconds(), 0))
	l.count.Add(1)
	l.sumUs.Add(us)
	for cur := l.minUs.Load(); us < cur && !l.minUs.CompareAndSwap(cur, us); cur = l.minUs.Load() {
	}
	for cur := l.maxUs.Load(); us > cur && !l.maxUs.CompareAndSwap(cur, us); cur = l.maxUs.Load() {
	}
}

// summary returns min and max in whole milliseconds and the average in
// milliseconds as ZooKeeper prints them (a Java double: "0.0", "1.25");
// all zero before the first request.
func (l *latencies) summary() (minMs, maxMs uint64, avgMs string) {
	n := l.count.Load()
	if n == 0 {
		return 0, 0, "0.0"
	}
	avg := float64(l.sumUs.Load()) / float64(n) / 1000
	s := strconv.FormatFloat(avg, 'f', -1, 64)
	if avg == math.Trunc(avg) {
		s += ".0"
	}
	return l.minUs.Load() / 1000, l.maxUs.Load() / 1000, s
}
