package testcluster

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check/linearize"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

// Checker L over the real cluster: concurrent clients doing get/put/CAS on a
// few keys through random nodes while a nemesis partitions, crashes and
// restarts nodes; the history must be linearizable. The same workload with
// the planted bug (linearizable reads served locally) must be caught.

var seedFlag = flag.Int64("seed", 0, "seed of randomized cluster tests (default: $LATCH_SEED, else the clock)")

// testSeed returns the seed of a randomized test and prints it.
func testSeed(t *testing.T) int64 {
	return int64(testseed.Pick(t, uint64(*seedFlag), "LATCH_SEED"))
}

// workloadDuration is how long the nemesis runs: short by default, long with LATCH_LONG=1.
func workloadDuration() time.Duration {
	if os.Getenv("LATCH_LONG") == "1" {
		return 2 * time.Minute
	}
	return 10 * time.Second
}

// workload runs clients that record a linearize history.
//
// Clients share keys (4 at a time) but move to fresh keys every rotate: the
// history is partitioned by key, so this bounds each partition Porcupine
// searches (and the writes left open in it) without making the clients any
// less concurrent, as Jepsen's independent keys do.
type workload struct {
	rec     *linearize.Recorder
	urls    []string
	keys    int
	start   time.Time
	rotate  time.Duration
	values  atomic.Uint64 // makes every written value unique
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	timeout time.Duration // per operation, client side
}

func newWorkload(c *Cluster, keys int) *workload {
	return &workload{
		rec: linearize.NewRecorder(), urls: c.URLs(), keys: keys, start: time.Now(), rotate: 2 * time.Second,
		stop: make(chan struct{}), timeout: 3 * time.Second,
	}
}

// key picks one of the keys of the current rotation.
func (w *workload) key(random *rand.Rand) string {
	return fmt.Sprintf("/lin/g%d/k%d", time.Since(w.start)/w.rotate, random.IntN(w.keys))
}

// run starts n clients seeded from seed.
func (w *workload) run(n int, seed int64) {
	for i := range n {
		w.wg.Add(1)
		go w.client(rand.New(rand.NewPCG(uint64(seed), uint64(i))))
	}
}

// halt stops the clients and waits for them; it may be called again.
func (w *workload) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// client issues random operations until stopped. After an operation with an
// unknown outcome it continues as a new client id: that one is still open.
func (w *workload) client(random *rand.Rand) {
	defer w.wg.Done()
	id := w.rec.NewClient()
	versions := map[string]uint64{} // last version this client saw per key
	for !w.stopped() {
		key := w.key(random)
		url := w.urls[random.IntN(len(w.urls))]
		in := linearize.RandomInput(random, key, versions, w.nextValue)
		out, state := w.do(id, url, in)
		switch state {
		case linearize.Settled:
			linearize.Observe(versions, in, out)
		case linearize.LeftOpen:
			id = w.rec.NewClient()
			w.pause(random, 10, 40)
		case linearize.Dropped:
			w.pause(random, 5, 20)
		}
	}
}

// pause waits a random few milliseconds (pacing after a failure, not
// correctness), or until the workload stops.
func (w *workload) pause(random *rand.Rand, minMillis, spreadMillis int) {
	select {
	case <-time.After(time.Duration(minMillis+random.IntN(spreadMillis)) * time.Millisecond):
	case <-w.stop:
	}
}

// waitSettled waits until the clients have settled n more operations
// (recorded with a definite outcome) than when it was called.
func (w *workload) waitSettled(n int, timeout time.Duration) bool {
	settled := func() int {
		recorded, unknown, _ := w.rec.Counts()
		return recorded - unknown
	}
	target := settled() + n
	return waitFor(timeout, func() bool { return settled() >= target })
}

func (w *workload) nextValue() string { return fmt.Sprintf("v%d", w.values.Add(1)) }

// do runs one operation against url and records it.
func (w *workload) do(client int, url string, in linearize.Input) (linearize.Output, linearize.Settlement) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	call := w.rec.Begin(client, in)
	var (
		node api.Node
		err  error
	)
	switch in.Kind {
	case linearize.Get:
		node, err = Get(ctx, url, in.Key, api.Linearizable)
	case linearize.Put:
		node, err = Put(ctx, url, in.Key, in.Value, "")
	case linearize.CAS:
		prev := "none"
		if in.Expect != 0 {
			prev = strconv.FormatUint(in.Expect, 10)
		}
		node, err = Put(ctx, url, in.Key, in.Value, prev)
	}
	return call.Settle(node, err)
}

// check verifies the history and writes a visualization when it is not
// linearizable: into $LATCH_ARTIFACTS if set, else into a temporary
// directory that is kept, unless the failure is expected (t.TempDir).
func (w *workload) check(t *testing.T, name string, expectFailure bool) linearize.Result {
	t.Helper()
	res, err := w.rec.Check(60 * time.Second)
	if err != nil {
		t.Fatalf("history not checkable: %v", err)
	}
	if !res.Linearizable() {
		dir := os.Getenv("LATCH_ARTIFACTS")
		if dir == "" && expectFailure {
			dir = t.TempDir()
		}
		if dir == "" {
			dir, err = os.MkdirTemp("", "latch-linearize-")
			if err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, name+".html")
		if err := res.Visualize(path); err != nil {
			t.Errorf("visualization: %v", err)
		} else {
			t.Logf("history visualization: %s", path)
		}
	}
	return res
}

// nemesis injects faults into c until its deadline, from the test goroutine.
type nemesis struct {
	t      *testing.T
	c      *Cluster
	rec    *linearize.Recorder
	random *rand.Rand
	down   map[int]bool
	counts map[string]int
}

func (n *nemesis) run(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		start := n.rec.Now()
		what := n.fault()
		// Let the fault act, then repair and let the cluster recover: the
		// pause paces the nemesis; nothing is asserted on timing.
		time.Sleep(time.Duration(300+n.random.IntN(700)) * time.Millisecond)
		n.heal()
		n.rec.Annotate("nemesis", what, start, n.rec.Now())
		n.counts[what]++
		time.Sleep(time.Duration(200+n.random.IntN(500)) * time.Millisecond)
	}
	n.heal()
}

// fault injects one random fault and names it.
func (n *nemesis) fault() string {
	c := n.c
	switch n.random.IntN(5) {
	case 0:
		if leader := c.leader(); leader >= 0 {
			c.Net.Isolate(c.Nodes[leader].ID)
			return "isolate leader"
		}
		fallthrough
	case 1:
		order := n.random.Perm(len(c.Nodes))
		minority := order[:len(c.Nodes)/2]
		c.Net.Partition(c.IDs(minority...), c.IDs(c.Others(minority...)...))
		return "majority/minority partition"
	case 2:
		if leader := c.leader(); leader >= 0 {
			c.Crash(leader)
			n.down[leader] = true
			return "crash leader"
		}
		fallthrough
	case 3:
		i := n.random.IntN(len(c.Nodes))
		c.Crash(i)
		n.down[i] = true
		return "crash node"
	default:
		leader := c.leader()
		if leader < 0 {
			leader = 0
		}
		other := (leader + 1 + n.random.IntN(len(c.Nodes)-1)) % len(c.Nodes)
		c.Net.Cut(c.Nodes[leader].ID, c.Nodes[other].ID)
		return "one-way cut from leader"
	}
}

// heal removes network faults and restarts crashed nodes.
func (n *nemesis) heal() {
	n.c.Net.Heal()
	for i := range n.down {
		n.c.Restart(i)
		delete(n.down, i)
	}
}

// TestLinearizableUnderFaults is checker L: 10 clients, 4 keys, 5 nodes,
// partitions, one-way cuts, leader isolation and power-loss crashes.
func TestLinearizableUnderFaults(t *testing.T) {
	seed := testSeed(t)
	c := New(t, 5, Options{RequestTimeout: time.Second, Seed: seed})
	w := newWorkload(c, 4)
	t.Cleanup(w.halt) // runs before the cluster closes
	w.run(10, seed)
	n := &nemesis{t: t, c: c, rec: w.rec, random: rand.New(rand.NewPCG(uint64(seed), 99)), down: map[int]bool{}, counts: map[string]int{}}
	n.run(workloadDuration())
	c.WaitLeader(10 * time.Second)
	// A quiet tail of operations on the healed cluster.
	if !w.waitSettled(300, 20*time.Second) {
		t.Fatalf("the healed cluster did not settle 300 more operations within 20s")
	}
	w.halt()

	res := w.check(t, "faults", false)
	t.Logf("L: %s; faults %v; seed %d", res, n.counts, seed)
	if !res.Linearizable() {
		t.Fatalf("history not linearizable (%s)", res.Outcome)
	}
	if res.Operations < 200 {
		t.Fatalf("only %d operations completed: the workload proves little", res.Operations)
	}
	c.EnsureSame(20 * time.Second)
}

// TestIsolatedLeaderStaleRead runs the workload while the leader is isolated,
// new values are written on the majority and read back from the old leader.
// Without the planted bug that read fails (503) and the history is
// linearizable; with UnsafeLocalReads it returns the old value and checker L
// must report the history not linearizable.
func TestIsolatedLeaderStaleRead(t *testing.T) {
	for _, tt := range []struct {
		name       string
		unsafe     bool
		want       porcupine.CheckResult
		staleReads int
	}{
		{"ReadIndex reads", false, porcupine.Ok, 0},
		{"planted bug: local reads", true, porcupine.Illegal, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seed := testSeed(t)
			c := New(t, 5, Options{RequestTimeout: time.Second, Seed: seed, UnsafeLocalReads: tt.unsafe})
			w := newWorkload(c, 4)
			t.Cleanup(w.halt)
			w.run(6, seed)
			scripted := w.rec.NewClient()
			ctx := ctxT(t, 30*time.Second)

			old := c.WaitLeader(10 * time.Second)
			key := "/lin/isolated"
			first := linearize.Input{Kind: linearize.Put, Key: key, Value: "before-isolation"}
			if _, state := w.do(scripted, c.URL(old), first); state != linearize.Settled {
				t.Fatalf("write through the leader failed")
			}
			start := w.rec.Now()
			c.Net.Isolate(c.Nodes[old].ID)
			next := c.LeaderIn(10*time.Second, c.Others(old)...)
			second := linearize.Input{Kind: linearize.Put, Key: key, Value: "after-isolation"}
			if _, err := Put(ctx, c.URL(next), "/lin/probe", "x", ""); err != nil {
				t.Fatalf("majority does not accept writes: %v", err)
			}
			if _, state := w.do(scripted, c.URL(next), second); state != linearize.Settled {
				t.Fatalf("write through the new leader failed")
			}
			out, state := w.do(scripted, c.URL(old), linearize.Input{Kind: linearize.Get, Key: key})
			stale := 0
			if state == linearize.Settled && out.Value != "after-isolation" {
				stale = 1
			}
			t.Logf("read on the isolated old leader: %+v (state %d)", out, state)
			c.Net.Heal()
			w.rec.Annotate("nemesis", "isolate leader "+c.Nodes[old].Name, start, w.rec.Now())
			c.WaitLeader(10 * time.Second)
			w.halt()

			if stale != tt.staleReads {
				t.Fatalf("stale reads on the old leader: %d, want %d", stale, tt.staleReads)
			}
			res := w.check(t, "isolated-leader", tt.want != porcupine.Ok)
			t.Logf("L: %s; seed %d", res, seed)
			if res.Outcome != tt.want {
				t.Fatalf("checker says %s, want %s", res.Outcome, tt.want)
			}
			c.EnsureSame(20 * time.Second)
		})
	}
}
