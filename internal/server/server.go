package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/replica"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
	"github.com/latch-io/latch/internal/watch"
)

// Server is one running latch server.
type Server struct {
	cfg       Config
	id        uint64
	log       *slog.Logger
	wal       *wal.WAL
	snaps     *snap.Store
	transport transport.Transport
	metrics   *metrics
	storage   storageState // what the WAL and snapshot store report of the disk
	// removedPeers are members this server applied the removal of.
	removedPeers removedSet
	// peerReports are the latest status reports heard from the other
	// members (statusreports.go), what ClusterHealth answers from.
	peerReports  peerReports
	started      time.Time       // a reading of Config.Clock when New began
	quiesceAcks  quiesceAcks     // members' acknowledgements of this leader's quiesces (quiesce.go)
	userRates    userRateLimiter // per-user request rates (userlimits.go)
	loginUsers   userRateLimiter // password checks per user name (userlimits.go)
	loginSources userRateLimiter // password checks per source address

	// shards places paths; groups[k] is shard k's group (consensus group
	// k+1), each set once its raft node runs.
	shards placement.Map
	// ticker drives the raft clock of every group: one timer per process.
	ticker *raftnode.Ticks
	groups []atomic.Pointer[group]
	// watches holds the clients' watches on this server, for every shard
	// (each group publishes into its watch.Shard).
	watches *watch.Registry
	// authView is the meta group's latest auth state (watchauth.go), for
	// the watch events of the other shards.
	authView atomic.Pointer[fsm.AuthView]

	// cleanupWake nudges shard 0's session cleanup loop (sessionend.go).
	cleanupWake chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when the server stopped, by Close or a fatal error
	errMu    sync.Mutex
	err      error // guarded by errMu: why the server stopped on its own
	bg       sync.WaitGroup
}

// New opens the data directory, recovers the state and starts serving peers.
// The client API is served by package httpapi over the returned server.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.UnsafeSyncJournal != "" {
		journal, err := vfs.NewJournal(cfg.FS, cfg.UnsafeSyncJournal, cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("server: open sync journal: %w", err)
		}
		cfg.FS = journal
	}
	s := &Server{
		cfg:     cfg,
		id:      MemberID(cfg.Name),
		started: cfg.Clock.Now(),
		log:     cfg.Logger.With("member", cfg.Name),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),

		cleanupWake: make(chan struct{}, 1),
	}
	shards, err := placement.New(cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("server: --shards: %w", err)
	}
	s.shards = shards
	s.groups = make([]atomic.Pointer[group], cfg.Shards)
	s.watches = watch.New(watch.Options{
		MaxPerSession: cfg.MaxWatchesPerSession, QueueLen: cfg.WatchQueueLen, RequireStream: true, Shards: cfg.Shards,
		MaxPerOwner: cfg.Auth.MaxUserWatches, Clock: cfg.Clock,
	})
	s.ticker = raftnode.NewTicks(cfg.Clock, cfg.TickInterval)
	s.metrics = newMetrics(s)
	if err := s.open(); err != nil {
		s.ticker.Stop()
		return nil, err
	}
	s.startShardCoordination()
	s.goBackground(s.runStatusReports)
	s.goBackground(s.runQuiesceChecks)
	return s, nil
}

// open opens the storage, checks the shard count, and starts the transport
// and the groups; on an error it closes what it opened.
func (s *Server) open() error {
	if err := s.openStorage(); err != nil {
		return err
	}
	recovered, err := s.openWAL()
	if err != nil {
		return err
	}
	if err := s.checkShardCount(recovered); err != nil {
		s.wal.Close()
		return err
	}
	if err := s.startTransport(); err != nil {
		s.wal.Close()
		return err
	}
	if err := s.startGroups(recovered); err != nil {
		s.stopGroups()
		s.transport.Close()
		s.wal.Close()
		return err
	}
	return nil
}

func (s *Server) openStorage() error {
	fs := s.cfg.FS
	for _, dir := range []string{s.walDir(), s.snapDir()} {
		if err := fs.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("server: create %s: %w", dir, err)
		}
	}
	snaps, err := snap.New(fs, s.snapDir(), snap.Options{Logger: s.log})
	if err != nil {
		return fmt.Errorf("server: open snapshots: %w", err)
	}
	s.snaps = snaps
	return nil
}

func (s *Server) openWAL() (map[uint64]*wal.GroupState, error) {
	w, recovered, err := wal.Open(s.cfg.FS, s.walDir(), wal.Options{
		Logger: s.log, SegmentSize: s.cfg.WALSegmentSize, UnsafeNoSync: s.cfg.UnsafeNoSync,
		// Zeros written ahead spare each fsync an extent conversion where
		// blocks are overwritten in place; on a copy-on-write filesystem
		// they would only make each flush need new space.
		ZeroAhead: vfs.WritesInPlace(s.cfg.DataDir),
	})
	if err != nil {
		return nil, fmt.Errorf("server: open WAL: %w", err)
	}
	s.wal = w
	return recovered, nil
}

func (s *Server) walDir() string  { return filepath.Join(s.cfg.DataDir, "wal") }
func (s *Server) snapDir() string { return filepath.Join(s.cfg.DataDir, "snap") }

func (s *Server) startTransport() error {
	var (
		tr  transport.Transport
		err error
	)
	if s.cfg.NewTransport != nil {
		tr, err = s.cfg.NewTransport(s.id, s, s)
	} else {
		tr, err = transport.NewTCP(transport.Config{
			ID: s.id, ClusterID: clusterID(s.cfg.ClusterToken), Shards: s.cfg.Shards, ListenAddr: s.cfg.PeerAddr,
			Listener: s.cfg.PeerListener, Handler: s, Snapshots: s, Logger: s.log,
			ServerTLS: s.cfg.PeerServerTLS, ClientTLS: s.cfg.PeerClientTLS,
		})
	}
	if err != nil {
		return fmt.Errorf("server: start peer transport: %w", err)
	}
	s.transport = tr
	s.transportMetrics()
	for name, addr := range s.cfg.InitialCluster {
		if id := MemberID(name); id != s.id {
			tr.AddPeer(id, addr)
		}
	}
	return nil
}

// clusterID identifies a cluster to the transport handshake, so a server
// configured for one cluster never steps messages of another.
func clusterID(token string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("latch-cluster:" + token))
	return h.Sum64()
}

// startGroups starts the raft node of every shard, the meta group (shard
// 0) first. Every group has the same members: each bootstraps from the same
// initial cluster, or joins with the others.
func (s *Server) startGroups(recovered map[uint64]*wal.GroupState) error {
	for shard := range s.cfg.Shards {
		if err := s.startGroup(shard, recovered[groupOfShard(shard)]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) startGroup(shard int, recovered *wal.GroupState) error {
	id := groupOfShard(shard)
	g, err := s.newGroup(id)
	if err != nil {
		return err
	}
	node, err := raftnode.Start(raftnode.Config{
		ID: s.id, Group: id, Peers: s.bootstrapPeers(), Join: s.cfg.Join, Recovered: recovered,
		WAL: s.wal, Snapshots: s.snaps, Transport: s.transport, Machine: g.Replica, Observer: g.Replica,
		Logger: s.log, TickInterval: s.cfg.TickInterval, ElectionTicks: s.cfg.ElectionTicks,
		SnapshotEvery: s.cfg.SnapshotEvery, SnapshotBytes: s.cfg.SnapshotBytes, Hooks: s.nodeHooks(), Clock: s.cfg.Clock,
		Ticker: s.ticker, Quiesce: shard != MetaShard && !s.cfg.NoQuiesce, // quiesce.go
	})
	if err != nil {
		return fmt.Errorf("server: start group %d (shard %d): %w", id, shard, err)
	}
	g.Attach(node)
	s.groups[shard].Store(g)
	s.goBackground(g.RunReads)
	if shard == 0 {
		g.View(func(f *fsm.FSM) { s.authView.CompareAndSwap(nil, f.AuthView()) })
		s.goBackground(func() { s.announce(g) })
		s.goBackground(func() { g.sessions.RunRelay(s.stop) })
		s.goBackground(func() { g.sessions.RunExpiry(s.stop) })
		if s.cfg.Shards > 1 {
			s.goBackground(s.runSessionCleanup)
			s.goBackground(s.runMarkFinisher)
			s.startQuotaLedger()
		}
	}
	go s.watchNode(node)
	return nil
}

// stopGroups stops every running group's raft node.
func (s *Server) stopGroups() {
	for shard := range s.groups {
		if g := s.groups[shard].Load(); g != nil {
			g.Node().Stop()
			g.FailAll(replica.ErrStopping)
		}
	}
}

// bootstrapPeers are the initial members with their addresses in the conf
// change context, so every replica records them in its state machine.
func (s *Server) bootstrapPeers() []raft.Peer {
	var peers []raft.Peer
	for _, name := range sortedNames(s.cfg.InitialCluster) {
		m := command.Member{ID: MemberID(name), Name: name, PeerURL: s.cfg.InitialCluster[name]}
		peers = append(peers, replica.BootstrapPeer(m))
	}
	return peers
}

func (s *Server) goBackground(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// watchNode stops the server when its raft node stops on a fatal error.
func (s *Server) watchNode(n *raftnode.Node) {
	select {
	case <-n.Done():
		if err := n.Err(); err != nil {
			s.errMu.Lock()
			s.err = err
			s.errMu.Unlock()
			s.log.Error("raft node stopped on a fatal error; the process must stop", "err", err)
			go s.Close()
		}
	case <-s.stop:
	}
}

// announce records this server's client address in the replicated member
// table, retrying until it is there, so any server can point clients at it.
func (s *Server) announce(g *group) {
	backoff := 50 * time.Millisecond
	for {
		if s.clientAddrRecorded(g) {
			return
		}
		cmd := &command.Command{Op: command.OpMemberSet, Member: command.Member{
			ID: s.id, Name: s.cfg.Name, PeerURL: s.cfg.PeerAddr, ClientURL: s.clientURL(),
			Learner: s.isLearner(g),
		}}
		if g.Leader() != raft.None {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
			_, _, err := g.Propose(ctx, cmd)
			cancel()
			if err == nil {
				return
			}
		}
		if !s.pause(backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// pause waits d on the server's clock; false if the server stopped first.
func (s *Server) pause(d time.Duration) bool {
	timer := s.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-s.stop:
		return false
	}
}

func (s *Server) clientAddrRecorded(g *group) bool {
	found := false
	g.View(func(f *fsm.FSM) {
		m, ok := f.Member(s.id)
		found = ok && m.ClientURL == s.clientURL() && m.PeerURL == s.cfg.PeerAddr
	})
	return found
}

func (s *Server) isLearner(g *group) bool {
	_, ok := g.Node().Status().Config.Learners[s.id]
	return ok
}

// lookupGroup returns running group id, or nil.
func (s *Server) lookupGroup(id uint64) *group {
	if id < 1 || id > uint64(len(s.groups)) {
		return nil
	}
	return s.groups[shardOfGroup(id)].Load()
}

// groupFor returns the group that holds path's record: the group of
// placement's Shard(path). Reads and writes of the tree find their group
// here; with one shard every path is in the meta group.
func (s *Server) groupFor(path string) *group {
	return s.groups[s.shards.Shard(path)].Load()
}

// childGroup returns the group that holds dir's children (placement's
// ChildShard): a lock's or an election's queue, whose nodes are the
// children of /locks/NAME or /elections/ROLE, so that one lock's fencing
// tokens come from one log.
func (s *Server) childGroup(dir string) *group {
	return s.groups[s.shards.ChildShard(dir)].Load()
}

// MetaShard is the shard of the meta group: the member table, the
// sessions and the auth store. The index of a reply about them (sessions,
// heartbeats, membership, status, auth) is of its log.
const MetaShard = 0

// metaGroup returns the group that holds the member table and the sessions
// (shard 0, consensus group 1), nil before it runs. Membership, sessions,
// heartbeats and status find their group here.
func (s *Server) metaGroup() *group { return s.groups[MetaShard].Load() }

// allGroups returns the running groups in shard order (nil entries for
// groups not running yet).
func (s *Server) allGroups() []*group {
	out := make([]*group, len(s.groups))
	for shard := range s.groups {
		out[shard] = s.groups[shard].Load()
	}
	return out
}

func (s *Server) electionTimeout() time.Duration {
	return time.Duration(s.cfg.ElectionTicks) * s.cfg.TickInterval
}

// ID is this server's raft member id.
func (s *Server) ID() uint64 { return s.id }

// Config returns the server's effective configuration.
func (s *Server) Config() Config { return s.cfg }

// Done is closed once the server has stopped; Err says why if it stopped on
// its own (a storage failure: the process must exit non-zero).
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is the fatal error that stopped the server, or nil.
func (s *Server) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close stops the server: raft, transport, background work, then the WAL.
func (s *Server) Close() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		s.stopGroups()
		s.ticker.Stop()
		s.bg.Wait()
		err = errors.Join(s.transport.Close(), s.wal.Close())
		close(s.done)
	})
	return err
}

// clientURL is the base URL clients use to reach this server's API.
func (s *Server) clientURL() string {
	if s.cfg.AdvertiseClientURL != "" {
		return s.cfg.AdvertiseClientURL
	}
	if s.cfg.ClientTLS {
		return "https://" + s.cfg.ClientAddr
	}
	return "http://" + s.cfg.ClientAddr
}
