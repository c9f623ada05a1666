package fanout

import (
	"context"
	"io"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// zkBuffer bounds each go-zookeeper client's buffers: its replies here are
// a small node's data and stat (the client's default is 1.5 MiB a
// connection, 15 GiB for 10,000).
const zkBuffer = 4 << 10

// TestWatchFanoutZooKeeper: LATCH_FIGURES=1 [LATCH_WATCHERS=10000] go test -run TestWatchFanoutZooKeeper -v -timeout 20m ./test/fanout
//
// The fan-out through the ZooKeeper port: one go-zookeeper client per
// watcher (its own connection and session), spread over the three members,
// each with a one-shot data watch on the key (getData with a watch), set
// again after each notification: in a first series of writes once every
// watcher got the write, in a second at once, as ZooKeeper clients do.
// Each write (an HTTP PUT to the leader, as in TestWatchFanout) is sent
// once every watch is set again, and is measured from its sending to its
// last notification.
// LATCH_FANOUT_PROFILE works as there.
func TestWatchFanoutZooKeeper(t *testing.T) {
	if os.Getenv("LATCH_FIGURES") == "" {
		t.Skip("a measurement, not a test: LATCH_FIGURES=1 go test -run TestWatchFanoutZooKeeper -v ./test/fanout")
	}
	watchers := watcherCount()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, leader := startCluster(t, ctx, watchers, true)
	urls := c.URLs()
	rssBefore := rss(t, urls)
	start := time.Now()
	conns := connectZK(t, c, watchers)
	var wg sync.WaitGroup
	profiles := startProfiles(t, "", "zk", urls) // none until the writes
	// teardown ends the watchers (the context first, then their clients,
	// which ends their requests in flight) and the profiles, on every path.
	teardown := sync.OnceFunc(func() {
		cancel()
		closeZK(conns)
		wg.Wait()
		profiles.stop()
	})
	defer teardown()
	t.Logf("connected %d ZooKeeper clients in %v", watchers, time.Since(start).Round(time.Millisecond))

	// Two series of writes on the same watchers: first each watch is set
	// again only once every watcher got the write (the fan-out alone), then
	// at once on its notification, as a ZooKeeper client does (the fan-out
	// and 10,000 getData requests on the same cores).
	const writes = 20
	w := &zkWatchers{arrivals: newArrivals(), gated: writes}
	for range 2 * writes {
		w.gates = append(w.gates, make(chan struct{}))
	}
	for _, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, t, conn)
		}()
	}
	profiles = startProfiles(t, os.Getenv("LATCH_FANOUT_PROFILE"), "zk", urls)
	meter := meterOf(c)
	var membersCPU, selfCPU float64
	var rssAfter []float64
	var gcs *collections
	series := []map[uint64]time.Time{{}, {}}
	for round := uint64(1); round <= 2*writes; round++ {
		if !testcluster.WaitFor(time.Minute, func() bool { return w.armed.Load() == int64(watchers)*int64(round) }) {
			t.Fatalf("round %d: %d of %d watches set", round, w.armed.Load()-int64(watchers)*int64(round-1), watchers)
		}
		if round == 1 {
			rssAfter = rss(t, urls)
			t.Logf("%d watches set in %v; load average before the writes: %s", watchers, time.Since(start).Round(time.Millisecond), loadAverage())
		}
		if round%writes == 1 {
			settleWatchers()
			gcs = countCollections(t, urls)
			membersCPU, selfCPU = meter.read(t)
		}
		w.round.Store(round)
		sent := time.Now()
		if err := testcluster.Do(ctx, "PUT", urls[leader], "/v1/kv"+hotKey, nil, api.PutRequest{Value: strconv.FormatUint(round, 10)}, nil); err != nil {
			t.Fatal(err)
		}
		series[(round-1)/writes][round] = sent
		if !testcluster.WaitFor(time.Minute, func() bool { return w.arrivals.count(round) >= watchers }) {
			t.Fatalf("round %d: %d of %d watchers notified within a minute", round, w.arrivals.count(round), watchers)
		}
		if round%writes == 0 {
			// Both series count the getData that sets each watch again:
			// the first after the round, inside the window all the same.
			meter.logPer(t, seriesName[(round-1)/writes], membersCPU, selfCPU, writes*watchers)
			gcs.log(t, seriesName[(round-1)/writes])
		}
		close(w.gates[round-1])
	}
	profiles.stop()
	t.Logf("load average after the writes: %s", loadAverage())
	teardown()
	for i, acked := range series {
		report(t, acked, w.arrivals, watchers, seriesName[i], rssBefore, rssAfter)
	}
}

// seriesName names TestWatchFanoutZooKeeper's two series of writes.
var seriesName = []string{
	"ZooKeeper port, spread over 3 members, each watch set again after the fan-out",
	"ZooKeeper port, spread over 3 members, each watch set again at once",
}

// zkWatchers are the watchers' shared state: round is the write being
// fanned out (set before it is sent; a watch set for round r fires on
// write r, since write r+1 waits for every watch to be set again), armed
// counts the watches set, arrivals the notifications by round. In the
// first gated rounds a watcher notified of round r sets its watch again
// once gates[r-1] is closed, after every watcher got the write.
type zkWatchers struct {
	round    atomic.Uint64
	armed    atomic.Int64
	arrivals *arrivals
	gated    uint64
	gates    []chan struct{}
}

// watch sets a data watch on the key through conn, records each
// notification's arrival under the current round and sets the watch again,
// until ctx ends.
func (w *zkWatchers) watch(ctx context.Context, t *testing.T, conn *zk.Conn) {
	for {
		_, _, ch, err := conn.GetW(hotKey)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("getData with a watch: %v", err)
			}
			return
		}
		w.armed.Add(1)
		select {
		case ev := <-ch:
			at := time.Now()
			if ev.Type != zk.EventNodeDataChanged {
				if ctx.Err() == nil {
					t.Errorf("watch event %v (%v), want a data change", ev.Type, ev.Err)
				}
				return
			}
			round := w.round.Load()
			w.arrivals.record(round, at)
			if round <= w.gated {
				select {
				case <-w.gates[round-1]:
				case <-ctx.Done():
					return
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// connectZK opens n go-zookeeper clients, round-robin over the members'
// ZooKeeper ports, each waited for until it has its session.
func connectZK(t *testing.T, c *proccluster.Cluster, n int) []*zk.Conn {
	conns := make([]*zk.Conn, n)
	quiet := zk.WithLogger(log.New(io.Discard, "", 0))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			addr := c.Members[i%len(c.Members)].ZKAddr
			conn, events, err := zk.Connect([]string{addr}, time.Minute, quiet, zk.WithLogInfo(false),
				zk.WithMaxBufferSize(zkBuffer), zk.WithMaxConnBufferSize(zkBuffer))
			if err != nil {
				errs <- err
				return
			}
			conns[i] = conn
			deadline := time.After(time.Minute)
			for {
				select {
				case ev := <-events:
					if ev.State == zk.StateHasSession {
						return
					}
				case <-deadline:
					errs <- os.ErrDeadlineExceeded
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		closeZK(conns)
		t.Fatalf("connect a ZooKeeper client: %v", err)
	}
	return conns
}

// closeZK closes the open clients of conns, 128 at a time.
func closeZK(conns []*zk.Conn) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	for _, conn := range conns {
		if conn == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn.Close()
		}()
	}
	wg.Wait()
}
