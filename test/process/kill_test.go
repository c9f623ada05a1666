package process

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// load writes unique keys through random members and remembers every
// acknowledged write.
type load struct {
	urls []string
	stop chan struct{}
	once sync.Once // closes stop
	wg   sync.WaitGroup

	mu     sync.Mutex        // guards acked and maxIdx
	acked  map[string]string // path -> value
	maxIdx uint64
	count  atomic.Int64
	failed atomic.Int64
}

func startLoad(urls []string, writers int) *load {
	l := &load{urls: urls, stop: make(chan struct{}), acked: map[string]string{}}
	for g := range writers {
		l.wg.Add(1)
		go l.run(g)
	}
	return l
}

func (l *load) run(g int) {
	defer l.wg.Done()
	random := rand.New(rand.NewPCG(uint64(g), 1))
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		path := fmt.Sprintf("/proc/w%d/k%d", g, seq)
		value := fmt.Sprintf("value-%d-%d", g, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		n, err := testcluster.Put(ctx, l.urls[random.IntN(len(l.urls))], path, value, "")
		cancel()
		if err != nil {
			l.failed.Add(1)
			time.Sleep(10 * time.Millisecond) // a dead member refuses at once; do not spin
			continue
		}
		l.mu.Lock()
		l.acked[path] = value
		l.maxIdx = max(l.maxIdx, n.Index)
		l.mu.Unlock()
		l.count.Add(1)
	}
}

func (l *load) waitCount(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	if !testcluster.WaitFor(timeout, func() bool { return l.count.Load() >= n }) {
		t.Fatalf("only %d of %d writes acknowledged within %v (%d failed)", l.count.Load(), n, timeout, l.failed.Load())
	}
}

// halt stops the writers and waits for them; it may be called again.
func (l *load) halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// staleGet reads path from one member once it has applied minIndex.
func staleGet(base, path string, minIndex uint64) (api.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := url.Values{"consistency": {api.Stale}, "min_index": {strconv.FormatUint(minIndex, 10)}}
	var n api.Node
	err := testcluster.Do(ctx, http.MethodGet, base, "/v1/kv"+path, q, nil, &n)
	return n, err
}

// TestKillLeaderUnderLoad: three latchd processes take writes from several
// goroutines; the leader is killed with SIGKILL, the others elect a new one
// and keep taking writes; the killed member restarts with the same flags
// and recovers from its data dir; every acknowledged write is then on every
// member.
func TestKillLeaderUnderLoad(t *testing.T) {
	c := proccluster.Start(t, proccluster.Options{Nodes: 3})
	c.WaitLeader(20 * time.Second)

	l := startLoad(c.URLs(), 8)
	defer l.halt()
	l.waitCount(t, 200, 30*time.Second)

	leader := c.WaitLeader(10 * time.Second)
	killed := c.Members[leader]
	c.Kill(leader)
	next := c.WaitLeader(20 * time.Second)
	t.Logf("killed leader %s with SIGKILL; %s took over", killed.Name, c.Members[next].Name)
	l.waitCount(t, l.count.Load()+200, 30*time.Second)

	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(20 * time.Second)
	l.waitCount(t, l.count.Load()+100, 30*time.Second)
	l.halt()

	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for _, m := range c.Members {
		for path, value := range l.acked {
			n, err := staleGet(m.ClientURL, path, l.maxIdx)
			if err != nil || n.Value != value {
				if lost < 10 {
					t.Errorf("acknowledged %s=%q: %s has %q, %v", path, value, m.Name, n.Value, err)
				}
				lost++
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d acknowledged writes missing", lost)
	}
	var views bytes.Buffer // each member's term and applied index, for the log
	for i, m := range c.Members {
		st, _ := c.Status(i)
		fmt.Fprintf(&views, " %s(term %d, applied %d)", m.Name, st.Term, st.AppliedIndex)
	}
	t.Logf("D: %d acknowledged writes present on all 3 members after kill -9 of leader %s and restart; %d writes failed or unknown;%s",
		len(l.acked), killed.Name, l.failed.Load(), views.String())
}
