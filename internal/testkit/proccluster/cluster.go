package proccluster

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/freeport"
)

// Options describe a cluster to start. Zero fields take the defaults noted.
type Options struct {
	Nodes             int           // members; default 3
	Tick              time.Duration // --tick; default 50ms
	ElectionTicks     int           // --election-ticks; default latchd's
	MinSessionTimeout time.Duration // --min-session-timeout; default latchd's
	SnapshotCount     uint64        // --snapshot-count; default latchd's
	Shards            int           // --shards; default latchd's (1)
	LogLevel          string        // --log-level; default "warn"
	ExtraFlags        []string      // appended to every member's flags
	// Netns puts every member in its own network namespace, so that
	// Partition and Block work; Start fails if NetnsAvailable does not
	// return nil, so check it first.
	Netns bool
	// SyncJournal starts every member with --unsafe-sync-journal, its
	// journal beside its data directory (<dir>/<name>.journal), so that
	// CrashLosingUnsynced can cut the data directory back to what was
	// fsynced.
	SyncJournal bool
	// RestoreFrom, when set, names a backup file ('latchctl snapshot
	// save') every member's data directory is prepared from with 'latchd
	// restore FILE --name --data-dir --initial-cluster' and RestoreFlags
	// (which must give the new --cluster-token; ExtraFlags gives it to the
	// members) before the members start.
	RestoreFrom  string
	RestoreFlags []string
	// TLS starts every member with TLS on both ports: certificates from a
	// peer CA (mutual TLS between members) and from a client CA (HTTPS,
	// client certificates required); see Cluster.Security. Without it,
	// members on non-loopback addresses (Netns) get --insecure-listen.
	TLS bool
	// ZK gives every member a ZooKeeper-protocol listener (--listen-zk) on a
	// free loopback port (with Netns, port 2181 of its namespace's address),
	// in Member.ZKAddr.
	ZK bool
	// DiskSize, when set (mount's size= syntax, "64m"), makes every
	// member's data directory its own tmpfs of that size, so that FillDisk
	// can fill it. It needs root.
	DiskSize string
	// ClockControl starts every member with --unsafe-clock-control, its
	// control file beside its data directory (<dir>/<name>.clock), so that
	// SetClock can skew its clock.
	ClockControl bool
}

// Member is one latchd process of a cluster, a slot that keeps its
// addresses for the cluster's life. ClientURL and PeerAddr never change;
// Name, DataDir and LogPath change only when Replace puts a new member in
// the slot, which callers must not do while others read them.
type Member struct {
	Name      string // --name: n1..nN, then the names given to Replace
	ClientURL string // http://host:port of the client API (https:// with Options.TLS)
	PeerAddr  string // host:port of the peer transport
	ZKAddr    string // host:port of the ZooKeeper listener (Options.ZK), else ""
	DataDir   string // --data-dir; kept across Kill and Restart
	LogPath   string // stdout and stderr of every run, appended

	args []string

	mu     sync.Mutex    // guards the fields below
	pid    int           // process id while running, else 0
	proc   *os.Process   // nil while not running
	exited chan struct{} // closed when proc was reaped
	err    error         // how the last run ended
	paused bool          // SIGSTOPped and not yet resumed
}

// Cluster is a set of latchd processes started by one test.
type Cluster struct {
	Members []*Member

	t       testing.TB
	bin     string
	opts    Options
	dir     string   // holds the members' data directories and logs
	network *network // nil on loopback
	// Security holds the certificates of a cluster started with
	// Options.TLS; nil otherwise.
	Security *Security
	http     *http.Client // for the members' client API (HTTPClient)
}

// Start builds latchd if needed and starts opts.Nodes members on free
// loopback ports. It does not wait for a leader; see WaitLeader.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts = withDefaults(opts)
	c := &Cluster{t: t, bin: Build(t), opts: opts, dir: t.TempDir()}
	if opts.TLS {
		c.Security = newSecurity(t, c.dir)
	}
	c.http = newHTTPClient(t, c.Security)
	clientAddrs, peerAddrs, zkAddrs := c.addresses(opts)
	var initial []string
	for i := range opts.Nodes {
		initial = append(initial, fmt.Sprintf("n%d=%s", i+1, peerAddrs[i]))
	}
	for i := range opts.Nodes {
		scheme := "http://"
		if opts.TLS {
			scheme = "https://"
		}
		m := &Member{ClientURL: scheme + clientAddrs[i], PeerAddr: peerAddrs[i]}
		if opts.ZK {
			m.ZKAddr = zkAddrs[i]
		}
		c.Members = append(c.Members, m)
		if err := c.name(i, fmt.Sprintf("n%d", i+1), strings.Join(initial, ",")); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.cleanup)
	if opts.RestoreFrom != "" {
		if err := c.restoreDataDirs(strings.Join(initial, ",")); err != nil {
			t.Fatalf("proccluster: %v", err)
		}
	}
	for i := range c.Members {
		if err := c.start(i); err != nil {
			t.Fatalf("proccluster: %v", err)
		}
	}
	return c
}

// addresses picks the members' client, peer and (Options.ZK) ZooKeeper
// addresses: free loopback ports, all reserved at once so that no two
// are the same, or fixed ports on each namespace's own address.
func (c *Cluster) addresses(opts Options) (clients, peers, zks []string) {
	if !opts.Netns {
		perMember := 2
		if opts.ZK {
			perMember = 3
		}
		ports := freeport.Ports(c.t, perMember*opts.Nodes)
		for i := range opts.Nodes {
			clients = append(clients, fmt.Sprintf("127.0.0.1:%d", ports[i]))
			peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[opts.Nodes+i]))
			if opts.ZK {
				zks = append(zks, fmt.Sprintf("127.0.0.1:%d", ports[2*opts.Nodes+i]))
			}
		}
		return clients, peers, zks
	}
	network, err := newNetwork(opts.Nodes)
	if err != nil {
		c.t.Fatalf("proccluster: %v", err)
	}
	c.network = network
	c.t.Cleanup(network.remove) // registered first, so it runs after the processes are killed
	for i := range opts.Nodes {
		clients = append(clients, network.address(i)+":2379")
		peers = append(peers, network.address(i)+":2380")
		if opts.ZK {
			zks = append(zks, network.address(i)+":2181")
		}
	}
	return clients, peers, zks
}

// name gives member i its name, data directory (its own tmpfs with
// Options.DiskSize), log and flags; initial is the --initial-cluster list
// and extra flags follow the options' flags.
func (c *Cluster) name(i int, name, initial string, extra ...string) error {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Name = name
	m.DataDir = filepath.Join(c.dir, name)
	m.LogPath = filepath.Join(c.dir, name+".log")
	if c.opts.DiskSize != "" {
		if err := c.mountDataDirLocked(m, c.opts.DiskSize); err != nil {
			return err
		}
	}
	m.args = append(memberFlagsLocked(c.opts, m, initial), extra...)
	switch {
	case c.Security != nil:
		c.Security.IssueMemberCerts(c.t, name, hostOf(m.ClientURL))
		m.args = append(m.args, c.Security.memberFlags(name)...)
	case c.network != nil:
		m.args = append(m.args, "--insecure-listen") // namespace addresses are not loopback
	}
	if c.network != nil {
		m.args = append([]string{"netns", "exec", c.network.namespace(i), c.bin}, m.args...)
	}
	return nil
}

func withDefaults(opts Options) Options {
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.Tick <= 0 {
		opts.Tick = 50 * time.Millisecond
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	return opts
}

// memberFlagsLocked returns the latchd flags of member m, whose name and
// data directory it reads: m.mu must be held.
func memberFlagsLocked(opts Options, m *Member, initial string) []string {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client", hostPort(m.ClientURL),
		"--listen-peer", m.PeerAddr,
		"--initial-cluster", initial,
		"--tick", opts.Tick.String(),
		"--log-level", opts.LogLevel,
	}
	if opts.ElectionTicks > 0 {
		args = append(args, "--election-ticks", strconv.Itoa(opts.ElectionTicks))
	}
	if opts.MinSessionTimeout > 0 {
		args = append(args, "--min-session-timeout", opts.MinSessionTimeout.String())
	}
	if opts.SnapshotCount > 0 {
		args = append(args, "--snapshot-count", strconv.FormatUint(opts.SnapshotCount, 10))
	}
	if opts.Shards > 0 {
		args = append(args, "--shards", strconv.Itoa(opts.Shards))
	}
	if opts.SyncJournal {
		args = append(args, "--unsafe-sync-journal", journalPathLocked(m))
	}
	if m.ZKAddr != "" {
		args = append(args, "--listen-zk", m.ZKAddr, "--zk-4lw-whitelist", "*")
	}
	if opts.ClockControl {
		args = append(args, "--unsafe-clock-control", clockPathLocked(m))
	}
	return append(args, opts.ExtraFlags...)
}

// ErrRunning means a member was started while its process still runs.
var ErrRunning = errors.New("proccluster: member is running")

// start runs member i's process with its flags, appending to its log.
func (c *Cluster) start(i int) error {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return fmt.Errorf("start %s: %w", m.Name, ErrRunning)
	}
	logFile, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", m.Name, err)
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== proccluster: start %s %s\n", c.bin, strings.Join(m.args, " "))
	program := c.bin
	if c.network != nil {
		program = "ip" // ip netns exec execs latchd, which keeps the PID
	}
	cmd := exec.Command(program, m.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	m.proc, m.pid, m.paused, m.err = cmd.Process, cmd.Process.Pid, false, nil
	exited := make(chan struct{})
	m.exited = exited
	track(cmd.Process, exited)
	go m.reap(cmd, exited)
	return nil
}

// reap waits for the process and records how it ended.
func (m *Member) reap(cmd *exec.Cmd, exited chan struct{}) {
	err := cmd.Wait()
	untrack(cmd.Process)
	m.mu.Lock()
	if m.proc == cmd.Process {
		m.proc, m.pid, m.paused = nil, 0, false
	}
	m.err = err
	m.mu.Unlock()
	close(exited)
}

// PID returns the member's process id while it runs, else 0.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pid
}

// Running reports whether member i's process is alive (paused or not).
func (c *Cluster) Running(i int) bool {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil
}

// Paused reports whether member i is stopped by Pause.
func (c *Cluster) Paused(i int) bool {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

// ExitError returns how member i's last run ended: nil while running or
// after a clean exit, the *exec.ExitError otherwise (a SIGKILL included).
func (c *Cluster) ExitError(i int) error {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Kill sends SIGKILL to member i's process and waits until it is reaped.
// A paused member is killed too. Killing a stopped member does nothing.
func (c *Cluster) Kill(i int) {
	m := c.Members[i]
	m.mu.Lock()
	proc, exited := m.proc, m.exited
	m.mu.Unlock()
	if proc == nil {
		return
	}
	_ = proc.Signal(syscall.SIGKILL)
	<-exited
}

// Pause sends SIGSTOP to member i's process: it keeps its sockets and
// memory but runs no code, as a process stuck in a long GC pause or
// swapped out. It returns false if the member is not running.
func (c *Cluster) Pause(i int) bool {
	return c.signal(i, syscall.SIGSTOP, true)
}

// Resume sends SIGCONT to a member paused by Pause.
func (c *Cluster) Resume(i int) bool {
	return c.signal(i, syscall.SIGCONT, false)
}

func (c *Cluster) signal(i int, sig syscall.Signal, paused bool) bool {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.proc.Signal(sig) != nil {
		return false
	}
	m.paused = paused
	return true
}

// Restart starts member i again with the same flags and data directory,
// killing it first if it still runs.
func (c *Cluster) Restart(i int) error {
	c.Kill(i)
	return c.start(i)
}

// URLs returns every member's client URL, in member order.
func (c *Cluster) URLs() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Live returns the indexes of members that run and are not paused.
func (c *Cluster) Live() []int {
	var out []int
	for i := range c.Members {
		if c.Running(i) && !c.Paused(i) {
			out = append(out, i)
		}
	}
	return out
}

// cleanup kills every process this cluster started, then prints the log
// tails if the test failed.
func (c *Cluster) cleanup() {
	for i := range c.Members {
		c.Kill(i)
	}
	if c.t.Failed() {
		c.LogTails(8000)
	}
}

// LogTails logs the last max bytes of every member's log.
func (c *Cluster) LogTails(max int) {
	for _, m := range c.Members {
		data, err := os.ReadFile(m.LogPath)
		if err != nil {
			c.t.Logf("proccluster: log of %s: %v", m.Name, err)
			continue
		}
		if len(data) > max {
			data = data[len(data)-max:]
		}
		c.t.Logf("proccluster: log of %s (%s, tail):\n%s", m.Name, m.LogPath, data)
	}
}
