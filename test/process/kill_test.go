package process

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testcluster"
)

// buildLatchd compiles cmd/latchd into a temporary directory.
func buildLatchd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "latchd")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build latchd: %v", err)
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/latch-io/latch/cmd/latchd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build latchd: %v\n%s", err, out)
	}
	return bin
}

// freePorts reserves n distinct loopback ports and releases them for use.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var listeners []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range listeners {
		ln.Close()
	}
	return ports
}

// member is one latchd process of the cluster.
type member struct {
	name    string
	args    []string
	url     string
	logPath string

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd  // nil while not running
}

// cluster is a set of latchd processes on loopback.
type cluster struct {
	t       *testing.T
	bin     string
	members []*member
}

func startCluster(t *testing.T, bin string, n int) *cluster {
	ports := freePorts(t, 2*n)
	dir := t.TempDir()
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[n+i]))
	}
	c := &cluster{t: t, bin: bin}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		m := &member{
			name: name,
			args: []string{
				"--name", name,
				"--data-dir", filepath.Join(dir, name),
				"--listen-client", fmt.Sprintf("127.0.0.1:%d", ports[i]),
				"--listen-peer", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
				"--initial-cluster", strings.Join(initial, ","),
				"--tick", "50ms",
				"--log-level", "warn",
			},
			url:     fmt.Sprintf("http://127.0.0.1:%d", ports[i]),
			logPath: filepath.Join(dir, name+".log"),
		}
		c.members = append(c.members, m)
	}
	t.Cleanup(c.killAll)
	for _, m := range c.members {
		c.start(m)
	}
	return c
}

// start runs m's process with its flags, appending to its log.
func (c *cluster) start(m *member) {
	c.t.Helper()
	logFile, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		c.t.Fatalf("start %s: %v", m.name, err)
	}
	logFile.Close() // the child has its own descriptor
	m.mu.Lock()
	m.cmd = cmd
	m.mu.Unlock()
}

// kill sends SIGKILL to m's process (only one this test started) and reaps it.
func (c *cluster) kill(m *member) {
	m.mu.Lock()
	cmd := m.cmd
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (c *cluster) killAll() {
	for _, m := range c.members {
		c.kill(m)
	}
	if c.t.Failed() {
		for _, m := range c.members {
			data, _ := os.ReadFile(m.logPath)
			if len(data) > 4000 {
				data = data[len(data)-4000:]
			}
			c.t.Logf("log of %s (tail):\n%s", m.name, data)
		}
	}
}

func (c *cluster) urls() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.url)
	}
	return out
}

func status(base string) (api.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var st api.Status
	err := testcluster.Do(ctx, http.MethodGet, base, "/v1/status", nil, nil, &st)
	return st, err
}

// waitLeader waits until every given member answers and all name the same
// leader, one of them, and returns its index.
func (c *cluster) waitLeader(timeout time.Duration, among ...int) int {
	c.t.Helper()
	leader := -1
	ok := testcluster.WaitFor(timeout, func() bool {
		leader = -1
		var leaderID string
		for _, i := range among {
			st, err := status(c.members[i].url)
			if err != nil || st.LeaderID == "" || (leaderID != "" && st.LeaderID != leaderID) {
				return false
			}
			leaderID = st.LeaderID
			if st.Role == "leader" {
				leader = i
			}
		}
		return leader >= 0
	})
	if !ok {
		c.t.Fatalf("members %v agree on no leader within %v", among, timeout)
	}
	return leader
}

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
	bin := buildLatchd(t)
	c := startCluster(t, bin, 3)
	all := []int{0, 1, 2}
	c.waitLeader(20*time.Second, all...)

	l := startLoad(c.urls(), 8)
	defer l.halt()
	l.waitCount(t, 200, 30*time.Second)

	leader := c.waitLeader(10*time.Second, all...)
	killed := c.members[leader]
	c.kill(killed)
	others := []int{}
	for _, i := range all {
		if i != leader {
			others = append(others, i)
		}
	}
	next := c.waitLeader(20*time.Second, others...)
	t.Logf("killed leader %s with SIGKILL; %s took over", killed.name, c.members[next].name)
	l.waitCount(t, l.count.Load()+200, 30*time.Second)

	c.start(killed)
	c.waitLeader(20*time.Second, all...)
	l.waitCount(t, l.count.Load()+100, 30*time.Second)
	l.halt()

	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for _, m := range c.members {
		for path, value := range l.acked {
			n, err := staleGet(m.url, path, l.maxIdx)
			if err != nil || n.Value != value {
				if lost < 10 {
					t.Errorf("acknowledged %s=%q: %s has %q, %v", path, value, m.name, n.Value, err)
				}
				lost++
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d acknowledged writes missing", lost)
	}
	var hashes bytes.Buffer
	for _, m := range c.members {
		st, _ := status(m.url)
		fmt.Fprintf(&hashes, " %s(term %d, applied %d)", m.name, st.Term, st.AppliedIndex)
	}
	t.Logf("D: %d acknowledged writes present on all 3 members after kill -9 of leader %s and restart; %d writes failed or unknown;%s",
		len(l.acked), killed.name, l.failed.Load(), hashes.String())
}
