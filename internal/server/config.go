package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
)

// Defaults of the single-node development server that `latchd` starts with no flags.
const (
	DefaultName         = "default"
	DefaultDataDir      = "latch-data"
	DefaultClientAddr   = "127.0.0.1:2379"
	DefaultPeerAddr     = "127.0.0.1:2380"
	DefaultMaxValueSize = 1 << 10
	MaxMaxValueSize     = 1 << 20
	// DefaultSnapshotEvery and DefaultSnapshotBytes are raftnode's.
	DefaultSnapshotEvery = raftnode.DefaultSnapshotEvery
	DefaultSnapshotBytes = raftnode.DefaultSnapshotBytes
)

// Config configures a server. Zero fields take the defaults above.
type Config struct {
	Name       string
	DataDir    string
	ClientAddr string // the client API's host:port
	// AdvertiseClientURL is the URL clients reach this server's API at,
	// announced to peers through the log for leader hints (default
	// "http://" + ClientAddr, "https://" with ClientTLS; set it when
	// listening on 0.0.0.0 or behind NAT).
	AdvertiseClientURL string
	// ClientTLS says the client API is served over TLS (the caller serves
	// it): the default advertised client URL is then https://.
	ClientTLS    bool
	PeerAddr     string // host:port the peer transport listens on
	PeerListener net.Listener
	// PeerServerTLS and PeerClientTLS, set together, secure the peer
	// transport (transport.Config.ServerTLS and ClientTLS).
	PeerServerTLS *tls.Config
	PeerClientTLS func(host string) *tls.Config
	// InitialCluster maps member names to peer addresses (host:port); it must
	// contain Name. It bootstraps a new cluster; on restart it only seeds peers.
	InitialCluster map[string]string
	// Join makes a server without state join a running cluster (whose members
	// InitialCluster lists) instead of bootstrapping one; the cluster must
	// have added it first (POST /v1/cluster/members).
	Join bool
	// ClusterToken names the cluster; peers with another token are refused
	// (default "latch").
	ClusterToken string

	// Shards is the number of shards (consensus groups), from 1 (the
	// default) to placement.MaxShards. It is fixed when the cluster is
	// created: recorded in the data directory, checked at every start and
	// in the peer handshake.
	Shards int

	TickInterval  time.Duration // raft tick (default 100ms)
	ElectionTicks int           // election timeout in ticks (default 10)
	SnapshotEvery uint64        // applied entries between snapshots (default 100,000)
	SnapshotBytes uint64        // applied entry data that triggers a snapshot sooner (default 64 MiB)

	MaxValueSize   int           // bytes (default 1 KiB, at most 1 MiB)
	RequestTimeout time.Duration // deadline of a proposal or a read barrier (default 5s)
	WALSegmentSize int64         // preallocated size of a WAL segment (default wal.DefaultSegmentSize)
	MaxPending     int           // proposals waiting at once before 429 (default 20,000)
	MinSessionTTL  time.Duration // session timeout clamp (default 2s)
	MaxSessionTTL  time.Duration // (default 60s)

	Auth AuthConfig // token lifetime, password hash cost (auth.go)

	MaxWatchesPerSession int // watches one session may hold (default 1,000)
	WatchQueueLen        int // undelivered events per session before it is disconnected (default 1,024)

	// FS is the filesystem of the data dir (default the OS's, its files
	// flushed by FlushMethod).
	FS vfs.FS
	// FlushMethod is how the default FS makes the WAL and snapshots
	// durable (default vfs.FlushAuto: through io_uring where the kernel
	// allows it, else fsync(2)).
	FlushMethod vfs.FlushMethod
	// NewTransport builds the peer transport (default TCP on PeerAddr).
	// testcluster passes the in-memory fake.
	NewTransport func(id uint64, h transport.Handler, s transport.Snapshots) (transport.Transport, error)

	// UnsafeLocalReads serves linearizable reads from local state without a
	// ReadIndex round. It exists only so the linearizability checker can be
	// shown to catch the resulting stale reads; never set it in production.
	UnsafeLocalReads bool
	// NoQuiesce makes this member behave as a latch without quiescing: its
	// groups never quiesce and it neither follows nor acknowledges a
	// leader's Quiesce. Tests only (a rolling upgrade's older member).
	NoQuiesce bool
	// UnsafeNoSync acknowledges writes without fsyncing the WAL, the planted
	// bug the durability checks must catch. Tests only.
	UnsafeNoSync bool
	// UnsafeSyncJournal, when set, wraps FS in a vfs.Journal that records
	// what every fsync made durable in this file (outside DataDir), so a
	// test can SIGKILL the process and cut DataDir back to it
	// (vfs.CutToJournal): a crash that loses unsynced data. Tests only.
	UnsafeSyncJournal string

	// Clock is the server's time: raft ticks, session deadlines, relay
	// acknowledgements, leader-stall detection and every retry or wait
	// (default clock.Real()). Tests pass a clock.Fake to run in virtual time
	// or a clock.Skewed to skew one node.
	Clock clock.Clock

	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.ClientAddr == "" {
		c.ClientAddr = DefaultClientAddr
	}
	if c.PeerAddr == "" {
		c.PeerAddr = DefaultPeerAddr
	}
	if len(c.InitialCluster) == 0 {
		c.InitialCluster = map[string]string{c.Name: c.PeerAddr}
	}
	if c.ClusterToken == "" {
		c.ClusterToken = "latch"
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
	}
	if c.MaxValueSize == 0 {
		c.MaxValueSize = DefaultMaxValueSize
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.MaxPending == 0 {
		c.MaxPending = 20000
	}
	if c.MinSessionTTL == 0 {
		c.MinSessionTTL = 2 * time.Second
	}
	if c.MaxSessionTTL == 0 {
		c.MaxSessionTTL = 60 * time.Second
	}
	if c.FS == nil {
		c.FS = vfs.OSWith(c.FlushMethod)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
}

func (c *Config) validate() error {
	if _, ok := c.InitialCluster[c.Name]; !ok {
		return fmt.Errorf("server: initial cluster does not name this member %q", c.Name)
	}
	if c.Shards < 1 || c.Shards > placement.MaxShards {
		return fmt.Errorf("server: --shards %d outside [1, %d]", c.Shards, placement.MaxShards)
	}
	if c.MaxValueSize < 1 || c.MaxValueSize > MaxMaxValueSize {
		return fmt.Errorf("server: max value size %d outside [1, %d]", c.MaxValueSize, MaxMaxValueSize)
	}
	if c.MinSessionTTL > c.MaxSessionTTL {
		return errors.New("server: min session timeout above max")
	}
	c.warnAboutTimeouts()
	return nil
}

// warnAboutTimeouts logs the timeout settings that work but defeat their
// purpose. An election must end well within a request's deadline: a write
// waits out a leader change within --request-timeout, and a promotion or a
// removal waits up to an election timeout for the leader to hear from its
// members (members.go) within the client's own deadline (the Go client's
// is 5 s by default, as --request-timeout is). With an election timeout
// over half the request deadline such calls can run out of time where a
// shorter election would have answered.
func (c *Config) warnAboutTimeouts() {
	election := time.Duration(c.ElectionTicks) * c.TickInterval
	if c.MinSessionTTL < election*3/2 {
		c.Logger.Warn("the minimum session timeout is under 1.5 election timeouts: sessions that short can expire in any election",
			"min_session_timeout", c.MinSessionTTL, "election_timeout", election)
	}
	if election*2 > c.RequestTimeout {
		c.Logger.Warn("the election timeout is over half the request deadline: writes during a leader change, and membership changes that wait for the leader to hear from its members, can run out of time",
			"election_timeout", election, "request_timeout", c.RequestTimeout)
	}
}

// ParseInitialCluster parses "n1=127.0.0.1:7101,n2=127.0.0.1:7102".
func ParseInitialCluster(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("initial cluster entry %q is not name=host:port", part)
		}
		addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "tcp://")
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("initial cluster entry %q: %w", part, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("initial cluster names %q twice", name)
		}
		out[name] = addr
	}
	return out, nil
}

// MemberID is the raft id of the member called name: a stable, non-zero hash,
// so every server derives the same ids from the same --initial-cluster.
func MemberID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("latch-member:" + name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// sortedNames returns the names of m in order.
func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
