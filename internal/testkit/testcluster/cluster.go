// Package testcluster runs N latch servers in one process for tests: over
// the in-memory fake transport (partitions, one-way cuts, drops, delays) and
// crashable in-memory filesystems (a crash keeps only what was fsynced), each
// serving the real HTTP API on a loopback port.
//
// It is for tests only. Waits are on conditions with deadlines, never on
// fixed sleeps.
package testcluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/httpapi"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/freeport"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
)

// Options tune the cluster; zero values take test-friendly defaults.
type Options struct {
	Shards           int // server.Config.Shards (default 1)
	Auth             server.AuthConfig
	WALSegmentSize   int64         // default 1 MiB
	TickInterval     time.Duration // default 10ms
	ElectionTicks    int           // default 10
	SnapshotEvery    uint64        // default latchd's (100,000)
	RequestTimeout   time.Duration // default 2s
	MinSessionTTL    time.Duration
	MaxSessionTTL    time.Duration
	UnsafeLocalReads bool // the planted stale-read bug, for checker tests
	UnsafeNoSync     bool // the planted acknowledge-before-fsync bug
	Seed             int64
	// HTTPLimits bound each node's client connections as latchd's flags do;
	// zero fields take latchd's defaults.
	HTTPLimits httpapi.Limits
	// Clock gives node name its clock (server.Config.Clock): raft ticks,
	// session deadlines, relays, expiry and every server-side wait. Default:
	// Time if set, else the real clock. Give nodes clock.Skewed clocks over
	// Time to skew one on purpose.
	Clock func(name string) clock.Clock
	// Time, when set, runs the cluster in virtual time: it is the fake clock
	// under the nodes' clocks, and nothing time-driven happens until the test
	// advances it (Advance, AdvanceUntil; New, WaitLeader and LeaderIn advance
	// it tick by tick while they wait). Real time still bounds every wait.
	Time *clock.Fake
	// NoQuiesce names the nodes that behave as a latch without quiescing
	// (server.Config.NoQuiesce).
	NoQuiesce []string
	// ClientTLS, when set, serves every node's client API over TLS with it
	// (URLs are https://, as latchd with --cert-file).
	ClientTLS *tls.Config
}

// Cluster is a set of in-process servers over one fake network.
type Cluster struct {
	t       testing.TB
	opts    Options
	Net     *transport.Network
	Nodes   []*Node
	initial map[string]string
}

// Node is one member: its filesystem survives crashes (cut to what was synced).
type Node struct {
	Name   string
	ID     uint64
	FS     *vfs.MemFS
	Server *server.Server // nil while crashed
	URL    string         // http://host:port (https:// with Options.ClientTLS) of its client API
	Join   bool           // started into a running cluster (AddNode)
	Clock  clock.Clock    // the node's clock (Options.Clock)
	addr   string
	// started is the clock's reading when the node's raft node started.
	started time.Time
	// stalled: its Ready loop is stalled on purpose (Cluster.Stall), so
	// Advance does not wait for it to tick.
	stalled bool
	http    *httpapi.Server
}

// New starts n servers and waits for a leader.
func New(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	opts.setDefaults()
	c := &Cluster{t: t, opts: opts, Net: transport.NewNetwork(opts.Seed), initial: map[string]string{}}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		c.initial[name] = c.PeerURL(name)
		c.Nodes = append(c.Nodes, &Node{Name: name, ID: server.MemberID(name), FS: vfs.NewCrashable()})
	}
	for i := range c.Nodes {
		c.start(i)
	}
	t.Cleanup(c.Close)
	c.WaitLeader(10 * time.Second)
	return c
}

// clockOf returns the clock of node name.
func (o *Options) clockOf(name string) clock.Clock {
	switch {
	case o.Clock != nil:
		return o.Clock(name)
	case o.Time != nil:
		return o.Time
	}
	return clock.Real()
}

func (o *Options) setDefaults() {
	if o.TickInterval == 0 {
		o.TickInterval = 10 * time.Millisecond
	}
	if o.ElectionTicks == 0 {
		o.ElectionTicks = 10
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 2 * time.Second
	}
}

// start (re)starts node i on its filesystem, keeping its client address.
func (c *Cluster) start(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	if n.addr == "" {
		n.addr = freeport.Addr(c.t) // the same address after a restart, which a dial cannot take
	}
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		c.t.Fatalf("testcluster: listen for %s: %v", n.Name, err)
	}
	n.addr = ln.Addr().String()
	if n.Clock == nil {
		n.Clock = c.opts.clockOf(n.Name)
	}
	n.URL = "http://" + n.addr
	if c.opts.ClientTLS != nil {
		n.URL = "https://" + n.addr
	}
	s, err := server.New(c.serverConfig(i))
	if err != nil {
		ln.Close()
		c.t.Fatalf("testcluster: start %s: %v", n.Name, err)
	}
	n.Server = s
	n.started = s.LastTick() // before the first tick: when its raft node started
	n.http = httpapi.NewServer(httpapi.New(s, logger(n.Name)), c.opts.HTTPLimits, logger(n.Name))
	if c.opts.ClientTLS != nil {
		ln = tls.NewListener(ln, c.opts.ClientTLS)
	}
	go n.http.Serve(ln)
}

// serverConfig is node i's server configuration (its client address set).
func (c *Cluster) serverConfig(i int) server.Config {
	n := c.Nodes[i]
	return server.Config{
		Name: n.Name, DataDir: "/data", ClientAddr: n.addr, ClientTLS: c.opts.ClientTLS != nil, PeerAddr: c.initial[n.Name], Shards: c.opts.Shards,
		InitialCluster: c.initial, Join: n.Join, TickInterval: c.opts.TickInterval, ElectionTicks: c.opts.ElectionTicks,
		SnapshotEvery: c.opts.SnapshotEvery, RequestTimeout: c.opts.RequestTimeout, WALSegmentSize: cmp.Or(c.opts.WALSegmentSize, 1<<20),
		MinSessionTTL: c.opts.MinSessionTTL, MaxSessionTTL: c.opts.MaxSessionTTL,
		UnsafeLocalReads: c.opts.UnsafeLocalReads, UnsafeNoSync: c.opts.UnsafeNoSync, FS: n.FS,
		NewTransport: func(id uint64, h transport.Handler, s transport.Snapshots) (transport.Transport, error) {
			return c.Net.Join(id, h, s), nil
		},
		Logger: logger(n.Name), Clock: n.Clock, Auth: c.opts.Auth, NoQuiesce: slices.Contains(c.opts.NoQuiesce, n.Name),
	}
}

// logger writes server logs to stderr only when LATCH_TEST_LOG is set.
func logger(name string) *slog.Logger {
	level := slog.LevelError + 4
	if os.Getenv("LATCH_TEST_LOG") != "" {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", name)
}

// AddNode starts a new, empty server that joins the running cluster (which
// must already have added it as a member, e.g. by POST /v1/cluster/members
// with PeerURL(name)) and returns its index.
func (c *Cluster) AddNode(name string) int {
	c.t.Helper()
	c.initial[name] = c.PeerURL(name)
	c.Nodes = append(c.Nodes, &Node{Name: name, ID: server.MemberID(name), FS: vfs.NewCrashable(), Join: true})
	c.start(len(c.Nodes) - 1)
	return len(c.Nodes) - 1
}

// PeerURL is the fake peer address of a member called name (host:port, as
// the server requires of a member it adds; the fake network ignores it).
func (c *Cluster) PeerURL(name string) string { return "fake-peer-" + name + ":2380" }

// Crash stops node i as a power loss would: whatever it had not fsynced is
// gone. From the moment of the crash its disk refuses every operation, so
// nothing it does afterwards is acknowledged.
func (c *Cluster) Crash(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	if n.Server == nil {
		return
	}
	n.FS.Inject(vfs.Fault{Ops: vfs.OpMutating, Err: vfs.ErrCrashed})
	survivor := n.FS.CrashClone(vfs.CrashOptions{})
	c.Net.Leave(n.ID)
	c.stop(n)
	n.FS = survivor
}

// Stop shuts node i down cleanly (its synced data stays).
func (c *Cluster) Stop(i int) {
	c.Net.Leave(c.Nodes[i].ID)
	c.stop(c.Nodes[i])
}

func (c *Cluster) stop(n *Node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = n.http.Shutdown(ctx)
	_ = n.Server.Close()
	n.Server = nil
	// The test client's idle connections to the node are closed at the
	// server's end now; one taken from the pool before its reader saw the
	// close would fail the next request (a PUT is not retried) with EOF.
	httpClient.CloseIdleConnections()
}

// Restart starts a stopped or crashed node i again from its filesystem.
func (c *Cluster) Restart(i int) { c.start(i) }

// Close stops every running node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.Server != nil {
			c.stop(n)
		}
	}
	c.Net.Close()
}

// Running returns the indexes of nodes that are up.
func (c *Cluster) Running() []int {
	var out []int
	for i, n := range c.Nodes {
		if n.Server != nil {
			out = append(out, i)
		}
	}
	return out
}

// Index returns the position of the member with raft id id, or -1.
func (c *Cluster) Index(id uint64) int {
	for i, n := range c.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}
