package proccluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/crashfs"
	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized proccluster tests (0: $PROCCLUSTER_SEED or the clock)")

// TestCrashLosingUnsynced crashes the leader of a 3-member cluster under
// write load again and again, each time cutting its data directory back to
// what it had fsynced, and restarts it. Afterwards every acknowledged write
// is on every member, and the cluster elects a leader and serves. At least
// one cut must have dropped unsynced bytes, or the test proved nothing.
func TestCrashLosingUnsynced(t *testing.T) {
	seed := testseed.Pick(t, *seedFlag, "PROCCLUSTER_SEED")
	c := Start(t, Options{Nodes: 3, SyncJournal: true, SnapshotCount: 200})
	c.WaitLeader(30 * time.Second)
	load := startLoad(c, seed, 8)
	defer load.stop()

	const minCrashes, maxCrashes = 6, 20
	var (
		crashes int
		total   crashfs.CutReport
	)
	for crashes < minCrashes || (total.DroppedBytes == 0 && crashes < maxCrashes) {
		leader, err := c.FindLeader(30*time.Second, c.Live()...)
		if err != nil {
			t.Fatal(err)
		}
		if err := load.waitAcked(load.acked()+150, 30*time.Second); err != nil {
			t.Fatalf("before crash %d: %v", crashes+1, err)
		}
		report, err := c.CrashLosingUnsynced(leader, seed+uint64(crashes))
		if err != nil {
			t.Fatal(err)
		}
		crashes++
		t.Logf("crash %d of leader %s: %s", crashes, c.Members[leader].Name, report)
		total.DroppedBytes += report.DroppedBytes
		total.Removed = append(total.Removed, report.Removed...)
		total.RemovedBytes += report.RemovedBytes
		total.Restored = append(total.Restored, report.Restored...)
		total.Gone = append(total.Gone, report.Gone...)
		if err := c.Restart(leader); err != nil {
			t.Fatal(err)
		}
	}
	load.stop()
	if err := load.err(); err != nil {
		t.Fatal(err)
	}

	leader := c.WaitLeader(30 * time.Second)
	final, err := testcluster.Put(context.Background(), c.Members[leader].ClientURL, "/crash/final", "served", "")
	if err != nil {
		t.Fatalf("cluster does not serve writes after the crashes: %v", err)
	}
	acked := load.snapshot()
	lost := 0
	for i, m := range c.Members {
		for key, write := range acked {
			if node, err := readStale(m.ClientURL, key, final.Index); err != nil || node.Value != write.value {
				lost++
				if lost <= 10 {
					t.Errorf("member %d (%s) lost acknowledged write %s = %q (index %d): got %q, %v", i, m.Name, key, write.value, write.index, node.Value, err)
				}
			}
		}
	}
	t.Logf("seed %d: %d acknowledged writes checked on %d members, %d lost; %d leader crashes losing unsynced data: %d bytes dropped, %d files removed (%d bytes), %d renames undone, %d durable names gone",
		seed, len(acked), len(c.Members), lost, crashes, total.DroppedBytes, len(total.Removed), total.RemovedBytes, len(total.Restored), len(total.Gone))
	if lost > 0 {
		t.Fatalf("%d acknowledged writes missing", lost)
	}
	if total.DroppedBytes == 0 {
		t.Fatalf("%d crashes dropped no unsynced byte: the fault did nothing", crashes)
	}
}

// ackedWrite is a write the cluster acknowledged (200).
type ackedWrite struct {
	value string
	index uint64
}

// load writes unique keys through every member in turn, from several
// goroutines, and remembers what was acknowledged.
type load struct {
	cluster *Cluster
	seed    uint64
	done    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
	count   atomic.Int64

	mu         sync.Mutex // guards the fields below
	writes     map[string]ackedWrite
	unexpected error // the first reply no crash explains
}

var loadClient = &http.Client{Timeout: 5 * time.Second}

func startLoad(c *Cluster, seed uint64, writers int) *load {
	l := &load{cluster: c, seed: seed, done: make(chan struct{}), writes: map[string]ackedWrite{}}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.write(w)
		}()
	}
	return l
}

func (l *load) write(writer int) {
	for n := 0; ; n++ {
		select {
		case <-l.done:
			return
		default:
		}
		m := l.cluster.Members[(writer+n)%len(l.cluster.Members)]
		key := fmt.Sprintf("/crash/w%d-%06d", writer, n)
		value := fmt.Sprintf("%d/%d/%d", l.seed, writer, n)
		index, err := put(m.ClientURL, key, value)
		l.mu.Lock()
		switch {
		case err == nil:
			l.writes[key] = ackedWrite{value: value, index: index}
			l.count.Add(1)
		case errors.Is(err, errUnexpectedReply) && l.unexpected == nil:
			l.unexpected = err
		}
		l.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // the member is down or leaderless: do not spin
		}
	}
}

// errUnexpectedReply is a reply that no crash explains (not 200, 429 or 503).
var errUnexpectedReply = errors.New("unexpected reply")

// put writes key = value through the member at base and returns the index
// of the write, or an error: a network error or 429/503 when its outcome is
// unknown, errUnexpectedReply otherwise.
func put(base, key, value string) (uint64, error) {
	body, _ := json.Marshal(api.PutRequest{Value: value})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/kv"+key, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := loadClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return 0, fmt.Errorf("put %s: %d %s", key, resp.StatusCode, data)
	default:
		return 0, fmt.Errorf("%w: put %s: %d %s", errUnexpectedReply, key, resp.StatusCode, data)
	}
	var node api.Node
	if err := json.Unmarshal(data, &node); err != nil {
		return 0, fmt.Errorf("%w: put %s: %v", errUnexpectedReply, key, err)
	}
	return node.Index, nil
}

func (l *load) acked() int64 { return l.count.Load() }

// waitAcked waits until at least n writes were acknowledged.
func (l *load) waitAcked(n int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for l.acked() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d writes acknowledged within %v, want %d", l.acked(), timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (l *load) stop() {
	l.stopped.Do(func() { close(l.done) })
	l.wg.Wait()
}

func (l *load) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unexpected
}

func (l *load) snapshot() map[string]ackedWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ackedWrite, len(l.writes))
	for key, write := range l.writes {
		out[key] = write
	}
	return out
}
