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
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/replica"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// mainGroup is the id of the one consensus group that runs today.
const mainGroup = 1

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

	main atomic.Pointer[group] // set once its raft node runs

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
		cfg:  cfg,
		id:   MemberID(cfg.Name),
		log:  cfg.Logger.With("member", cfg.Name),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	s.metrics = newMetrics(s)
	if err := s.openStorage(); err != nil {
		return nil, err
	}
	recovered, err := s.openWAL()
	if err != nil {
		return nil, err
	}
	if err := s.startTransport(); err != nil {
		s.wal.Close()
		return nil, err
	}
	if err := s.startGroup(recovered[mainGroup]); err != nil {
		s.transport.Close()
		s.wal.Close()
		return nil, err
	}
	return s, nil
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
			ID: s.id, ClusterID: clusterID(s.cfg.ClusterToken), ListenAddr: s.cfg.PeerAddr,
			Listener: s.cfg.PeerListener, Handler: s, Snapshots: s, Logger: s.log,
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

func (s *Server) startGroup(recovered *wal.GroupState) error {
	g := s.newGroup(mainGroup)
	node, err := raftnode.Start(raftnode.Config{
		ID: s.id, Group: mainGroup, Peers: s.bootstrapPeers(), Join: s.cfg.Join, Recovered: recovered,
		WAL: s.wal, Snapshots: s.snaps, Transport: s.transport, Machine: g.Replica, Observer: g.Replica,
		Logger: s.log, TickInterval: s.cfg.TickInterval, ElectionTicks: s.cfg.ElectionTicks,
		SnapshotEvery: s.cfg.SnapshotEvery, Hooks: s.nodeHooks(), Clock: s.cfg.Clock,
	})
	if err != nil {
		return fmt.Errorf("server: start group %d: %w", mainGroup, err)
	}
	g.Attach(node)
	s.main.Store(g)
	s.goBackground(g.RunReads)
	s.goBackground(func() { s.announce(g) })
	s.goBackground(func() { g.sessions.RunRelay(s.stop) })
	s.goBackground(func() { g.sessions.RunExpiry(s.stop) })
	go s.watchNode(node)
	return nil
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

// lookupGroup returns the running group id, or nil.
func (s *Server) lookupGroup(id uint64) *group {
	if id != mainGroup {
		return nil
	}
	return s.main.Load()
}

// groupFor returns the group that owns path: every path belongs to the main
// group until the tree is sharded, and this is the one place that will
// change. Reads and writes of the tree, locks, elections and watches find
// their group here.
func (s *Server) groupFor(path string) *group {
	_ = path
	return s.main.Load()
}

// metaGroup returns the group that holds the member table and the sessions
// (the main group), nil before it runs. Membership, sessions, heartbeats and
// status find their group here.
func (s *Server) metaGroup() *group { return s.main.Load() }

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
		if g := s.main.Load(); g != nil {
			g.Node().Stop()
			g.FailAll(replica.ErrStopping)
		}
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
	return "http://" + s.cfg.ClientAddr
}
