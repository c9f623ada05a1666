package process

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestShardsRecursiveWatchAcrossKill runs three latchd processes with
// --shards 4 and a Go client's persistent recursive watch over a prefix
// whose directories live in all 4 shards, while a writer creates nodes
// under it. It kills -9 the member holding the watch's event stream; the
// client reconnects to another member and re-registers with each shard's
// known index. Every acknowledged create is then seen exactly once: as its
// own CREATED event (with its shard and that shard's index), or covered by
// a catch-up (Resync) event of its shard at or above its index, and per
// shard the events come in nondecreasing index order.
func TestShardsRecursiveWatchAcrossKill(t *testing.T) {
	const shards = 4
	c := proccluster.Start(t, proccluster.Options{Nodes: 3, Shards: shards})
	if !testcluster.WaitFor(60*time.Second, func() bool { return everyShardLed(c, shards) }) {
		t.Fatal("not every shard elected a leader")
	}
	cl, err := client.New(client.Config{Endpoints: c.URLs(), NotifyJitter: -1, ReconnectJitter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := cl.NewSession(ctx, 30*time.Second)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	defer sess.Close(context.Background())
	place, _ := placement.New(shards)
	dirs := dirsInEveryShard(t, place, "/sw", shards)
	for _, d := range dirs {
		if _, err := cl.Put(ctx, d+"/first", "x"); err != nil {
			t.Fatalf("put under %s: %v", d, err)
		}
	}
	w, err := sess.Watch(ctx, "/sw", client.WatchRecursive(), client.Persistent())
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Close()

	var rec watchRecord
	go rec.consume(w)
	wr := &shardWriter{cl: cl, dirs: dirs, place: place, created: map[string]api.Node{}}
	writing, stopWriting := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); wr.run(writing, 1<<30) }()
	defer func() { stopWriting(); <-writerDone }()
	holder := -1
	if !testcluster.WaitFor(30*time.Second, func() bool { holder = streamHolder(c); return holder >= 0 }) {
		t.Fatal("no member reports the session's event stream")
	}
	if !testcluster.WaitFor(60*time.Second, func() bool { return rec.count() >= 20 }) {
		t.Fatalf("only %d events before the kill", rec.count())
	}
	t.Logf("killing %s, which holds the event stream", c.Members[holder].Name)
	c.Kill(holder)
	killedAt := wr.count()
	other := -1
	if !testcluster.WaitFor(60*time.Second, func() bool { other = streamHolder(c); return other >= 0 }) {
		t.Fatal("the client did not reopen its stream on a survivor")
	}
	reopenedAt := wr.count()
	if !testcluster.WaitFor(60*time.Second, func() bool { return wr.count() >= reopenedAt+40 }) {
		t.Fatalf("only %d creates after the reconnect", wr.count()-reopenedAt)
	}
	stopWriting()
	<-writerDone
	t.Logf("%d creates before the kill, %d while the stream was down, %d after", killedAt, reopenedAt-killedAt, wr.count()-reopenedAt)
	if !testcluster.WaitFor(60*time.Second, func() bool { return rec.covers(wr.snapshot()) == "" }) {
		t.Fatalf("after the reconnect to %s: %s", c.Members[other].Name, rec.covers(wr.snapshot()))
	}
	if problem := rec.problem(); problem != "" {
		t.Fatal(problem)
	}
	direct, resyncs := rec.tally()
	t.Logf("%d creates over %d shards: %d delivered as their own events, %d catch-up events; stream moved from %s to %s",
		len(wr.snapshot()), shards, direct, resyncs, c.Members[holder].Name, c.Members[other].Name)
}

// everyShardLed reports whether some live member sees a leader in every
// shard.
func everyShardLed(c *proccluster.Cluster, shards int) bool {
	for _, i := range c.Live() {
		st, err := c.Status(i)
		if err != nil || len(st.Shards) != shards {
			continue
		}
		led := true
		for _, sh := range st.Shards {
			led = led && sh.LeaderID != "" && sh.LeaderID != "0x0000000000000000"
		}
		if led {
			return true
		}
	}
	return false
}

// dirsInEveryShard returns one directory under parent per shard, each
// holding its children in that shard.
func dirsInEveryShard(t *testing.T, place placement.Map, parent string, shards int) []string {
	found := map[int]string{}
	for i := 0; len(found) < shards && i < 10000; i++ {
		d := fmt.Sprintf("%s/d%d", parent, i)
		if found[place.ChildShard(d)] == "" {
			found[place.ChildShard(d)] = d
		}
	}
	if len(found) < shards {
		t.Fatalf("directories in %d shards only", len(found))
	}
	out := make([]string, 0, shards)
	for k := range shards {
		out = append(out, found[k])
	}
	return out
}

// streamHolder returns the live member whose /metrics report an attached
// event stream, or -1.
func streamHolder(c *proccluster.Cluster) int {
	for _, i := range c.Live() {
		resp, err := http.Get(c.Members[i].ClientURL + "/metrics")
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(resp.Body)
		found := false
		for scanner.Scan() {
			if line := scanner.Text(); strings.HasPrefix(line, "latch_event_streams_open ") && !strings.HasSuffix(line, " 0") {
				found = true
			}
		}
		resp.Body.Close()
		if found {
			return i
		}
	}
	return -1
}

// shardWriter creates nodes under the directories, through the client
// (which fails over), and remembers each acknowledged create.
type shardWriter struct {
	cl    *client.Client
	dirs  []string
	place placement.Map
	next  int

	mu      sync.Mutex
	created map[string]api.Node // guarded by mu
}

// run creates n nodes, one after the other. A create whose outcome is
// unknown is retried with prev_version=none; "exists" then means an
// earlier attempt applied it, and a read gives its indexes.
func (wr *shardWriter) run(ctx context.Context, n int) {
	for i := 0; i < n && ctx.Err() == nil; i++ {
		p := fmt.Sprintf("%s/k%d", wr.dirs[wr.next%len(wr.dirs)], wr.next)
		wr.next++
		for ctx.Err() == nil {
			node, err := wr.cl.Put(ctx, p, "v", client.PrevNone())
			if api.CodeOf(err) == api.CodePreconditionFailed {
				node, err = wr.cl.Get(ctx, p)
			}
			if err == nil {
				wr.mu.Lock()
				wr.created[p] = *node
				wr.mu.Unlock()
				break
			}
			time.Sleep(20 * time.Millisecond) // a member is down: the client fails over
		}
	}
}

func (wr *shardWriter) count() int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return len(wr.created)
}

func (wr *shardWriter) snapshot() map[string]int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	out := map[string]int{}
	for p, n := range wr.created {
		out[p] = int(n.CreatedIndex) // the index of the node's own shard
	}
	return out
}

// watchRecord is what the watcher delivered.
type watchRecord struct {
	mu       sync.Mutex
	created  map[string][]api.Event // CREATED events by path
	resyncs  map[int][]uint64       // catch-up indexes by shard
	last     map[int]uint64         // newest index per shard
	problems []string
	events   int
}

func (r *watchRecord) consume(w *client.Watcher) {
	for ev := range w.Events() {
		r.add(ev)
	}
}

func (r *watchRecord) add(ev client.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.created == nil {
		r.created, r.resyncs, r.last = map[string][]api.Event{}, map[int][]uint64{}, map[int]uint64{}
	}
	r.events++
	if ev.Index < r.last[ev.Shard] {
		r.problems = append(r.problems, fmt.Sprintf("shard %d: event at %d after one at %d", ev.Shard, ev.Index, r.last[ev.Shard]))
	}
	r.last[ev.Shard] = max(r.last[ev.Shard], ev.Index)
	switch {
	case ev.Resync:
		r.resyncs[ev.Shard] = append(r.resyncs[ev.Shard], ev.Index)
	case ev.Event.Event == "CREATED":
		r.created[ev.Path] = append(r.created[ev.Path], ev.Event)
		if len(r.created[ev.Path]) > 1 {
			r.problems = append(r.problems, fmt.Sprintf("CREATED %s delivered %d times", ev.Path, len(r.created[ev.Path])))
		}
	}
}

func (r *watchRecord) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}

// covers returns "" if every create in want (path -> created index) was
// delivered or is covered by a catch-up of its shard at or above its
// index, else what is missing.
func (r *watchRecord) covers(want map[string]int) string {
	place, _ := placement.New(4)
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := 0
	example := ""
	for p, index := range want {
		if len(r.created[p]) > 0 || coveredBy(r.resyncs[place.Shard(p)], uint64(index)) {
			continue
		}
		missing++
		example = fmt.Sprintf("%s (shard %d, index %d)", p, place.Shard(p), index)
	}
	if missing == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d creates neither delivered nor covered by a catch-up, e.g. %s", missing, len(want), example)
}

func coveredBy(resyncs []uint64, index uint64) bool {
	for _, at := range resyncs {
		if at >= index {
			return true
		}
	}
	return false
}

func (r *watchRecord) problem() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.problems, "; ")
}

func (r *watchRecord) tally() (direct, resyncs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, list := range r.resyncs {
		resyncs += len(list)
	}
	return len(r.created), resyncs
}
