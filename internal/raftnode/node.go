package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/wal"
)

// StateMachine is what the node applies committed entries to. Every method is
// called only from the node's Ready loop goroutine, in log order.
type StateMachine interface {
	// Apply applies committed normal entries (empty ones included: they only
	// advance the applied index). An error means an entry cannot be applied
	// (this binary cannot decode it): the entries before it are applied, none
	// after, and the node stops with that error, which is fatal.
	Apply(entries []raftpb.Entry) error
	// ApplyConfChange records a committed membership change at index; cs is the
	// configuration after it. An error is fatal, as for Apply.
	ApplyConfChange(index uint64, cc raftpb.ConfChangeV2, cs raftpb.ConfState) error
	// Snapshot returns a writer of the state as of the last applied entry. It
	// must take O(1) on the Ready loop; the returned func runs on another
	// goroutine while Apply continues.
	Snapshot() func(io.Writer) error
	// Restore replaces the whole state with a snapshot's body.
	Restore(meta snap.Meta, body io.Reader) error
}

// Observer receives the node's signals that are not log entries. Calls come
// from the Ready loop and must not block.
type Observer interface {
	// ReadStates delivers answers to ReadIndex requests.
	ReadStates(states []raft.ReadState)
	// LeaderChanged reports a new leader (raft.None when there is none) and term.
	LeaderChanged(leader, term uint64)
}

// Config configures one group's node.
type Config struct {
	ID    uint64 // this server's raft id; non-zero
	Group uint64 // consensus-group id
	// Peers bootstraps a brand-new group when Recovered holds no state.
	Peers []raft.Peer
	// Join starts a node without state as a member-to-be of a running group:
	// no bootstrap; it waits for the leader, which added it by a conf
	// change, to send it a snapshot and the log.
	Join bool
	// Recovered is what wal.Open found for this group (nil: nothing).
	Recovered *wal.GroupState

	WAL       *wal.WAL
	Snapshots *snap.Store
	Transport transport.Transport
	Machine   StateMachine
	Observer  Observer
	Logger    *slog.Logger

	// Clock drives raft's logical clock (a ticker of TickInterval), the
	// bound on a forwarded proposal's wait, LastTick and the hook durations.
	// Default clock.Real(); tests step ticks by advancing a clock.Fake.
	Clock        clock.Clock
	TickInterval time.Duration // default 100ms
	// Ticker, if set, drives raft's clock instead of a ticker of the node's
	// own: one shared by every group of the process (its interval is then
	// the Ticks'; TickInterval still scales the forwarded-proposal bound).
	Ticker        *Ticks
	ElectionTicks int // default 10
	HeartbeatTick int // default 1
	// SnapshotEvery is how many applied entries trigger a snapshot (default 10,000).
	SnapshotEvery uint64
	// CompactionLag is how many entries before a snapshot stay in the raft log
	// for slow followers (default 5,000, or half of SnapshotEvery if smaller).
	CompactionLag uint64
	// MaxInflightMsgs bounds pipelined appends per follower (default 256).
	MaxInflightMsgs int
	// Quiesce lets the group stop ticking while idle: see the package
	// comment, "Quiescing". Without it the node never quiesces and ignores
	// Quiesce calls.
	Quiesce bool
	// Hooks observe the loop for metrics; nil fields are skipped.
	Hooks Hooks
}

// Hooks are optional callbacks for metrics, called from the Ready loop
// (Applied, SnapshotSave) or from whichever goroutine saved to the WAL, the
// append goroutine or the Ready loop (Persisted, StorageFull): they must be
// safe for concurrent use.
type Hooks struct {
	Persisted    func(d time.Duration, entries int)
	Applied      func(d time.Duration, entries int)
	SnapshotSave func(d time.Duration, err error)
	// StorageFull reports a part of storage ("wal" or "snapshot") that
	// found the filesystem full (err says how), and with a nil err that it
	// wrote again: see the package comment, "A full disk".
	StorageFull func(part string, err error)
}

// Node is a running raft node of one group.
type Node struct {
	cfg     Config
	raft    raft.Node
	storage *raft.MemoryStorage
	log     *slog.Logger

	stopc chan struct{}
	donec chan struct{}

	// appender makes entries durable on a goroutine of its own; appendStop
	// is closed by the Ready loop when it returns, to stop it.
	appender   *appender
	appendStop chan struct{}
	// stepCtx bounds the responses stepped into raft; cancelled on stop.
	stepCtx    context.Context
	stepCancel context.CancelFunc
	// progress has a slot signalled after each WAL save, to wake a Ready
	// loop that waits while storage is stalled.
	progress chan struct{}
	// walFull is set while the WAL finds the filesystem full; written by
	// whichever goroutine saves.
	walFull atomic.Bool
	// persistedHardState is the hard state last written to the WAL; a
	// message whose hard state differs from it only in the commit index
	// needs no fsync. Owned by whoever stores appends: the append goroutine,
	// or the Ready loop while the append goroutine is flushed.
	persistedHardState raftpb.HardState

	// started is the clock's reading when the node started; lastTick is
	// when the Ready loop last ticked raft, as a duration after started (not
	// Unix nanoseconds, which would lose the reading's monotonic part and
	// move with the system clock). A loop stuck in a slow fsync stops
	// ticking, and with it stops noticing that it lost leadership.
	started  time.Time
	lastTick atomic.Int64
	// leader is raft's leader as the Ready loop last saw it (raft.None when
	// there is none). Written only by the Ready loop; Step reads it.
	leader atomic.Uint64
	// quiet is the group's quiescing state (quiesce.go).
	quiet quiescence

	errMu sync.Mutex
	err   error // guarded by errMu: the fatal error that stopped the loop

	// Owned by the Ready loop goroutine:
	confState     raftpb.ConfState
	appliedIndex  uint64
	snapshotIndex uint64
	snapshotting  bool
	// snapshotDue forces the next snapshot whatever the interval: after a
	// conf change, so the snapshot a new member is sent names it (raft
	// ignores a snapshot whose configuration leaves the receiver out).
	snapshotDue bool
	snapDone    chan snapshotResult
	// snapshotFull is set while the snapshot store finds the filesystem
	// full; no snapshot starts before snapshotRetryAt.
	snapshotFull    bool
	snapshotRetryAt time.Time
	// tickPending is a tick that came while storage was stalled, to be
	// taken when it resumes.
	tickPending bool
	// parkedSnapshot is a snapshot's result received while a Ready waited
	// for space, finished after that Ready (see parkSnapshot).
	parkedSnapshot *snapshotResult
	term           uint64
	ticks          uint64 // raft ticks since the node started
}

// ErrStopped is returned by calls on a node that has stopped.
var ErrStopped = errors.New("raftnode: stopped")

// Start recovers the group from cfg.Recovered and the snapshot store (or
// bootstraps it from cfg.Peers) and starts its Ready loop.
func Start(cfg Config) (*Node, error) {
	cfg.setDefaults()
	n := &Node{
		cfg:      cfg,
		storage:  raft.NewMemoryStorage(),
		log:      cfg.Logger.With("group", cfg.Group),
		stopc:    make(chan struct{}),
		donec:    make(chan struct{}),
		snapDone: make(chan snapshotResult, 1),

		appendStop: make(chan struct{}),
		progress:   make(chan struct{}, 1),
	}
	n.appender = newAppender(n)
	n.stepCtx, n.stepCancel = context.WithCancel(context.Background())
	restarted, err := n.recover()
	if err != nil {
		return nil, err
	}
	rc := n.raftConfig()
	if restarted || cfg.Join {
		n.raft = raft.RestartNode(rc)
	} else {
		if len(cfg.Peers) == 0 {
			return nil, fmt.Errorf("raftnode: group %d has no state and no peers to bootstrap", cfg.Group)
		}
		n.raft = raft.StartNode(rc, cfg.Peers)
	}
	n.started = cfg.Clock.Now()
	go n.run()
	return n, nil
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTick == 0 {
		c.HeartbeatTick = 1
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 10000
	}
	if c.CompactionLag == 0 {
		c.CompactionLag = max(1, min(5000, c.SnapshotEvery/2))
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
}

func (n *Node) raftConfig() *raft.Config {
	return &raft.Config{
		ID:                        n.cfg.ID,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTick,
		Storage:                   n.storage,
		Applied:                   n.appliedIndex,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs:           n.cfg.MaxInflightMsgs,
		AsyncStorageWrites:        true,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{n.log},
	}
}

// Propose proposes data as a normal entry. It returns once raft accepted the
// proposal locally (not once committed); raft.ErrProposalDropped when there is
// no leader to take it.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	n.wake()
	return n.raft.Propose(ctx, data)
}

// ProposeConfChange proposes a membership change.
func (n *Node) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	n.wake()
	return n.raft.ProposeConfChange(ctx, cc)
}

// ReadIndex asks for a read index tagged rctx; the answer arrives through
// Observer.ReadStates.
func (n *Node) ReadIndex(ctx context.Context, rctx []byte) error {
	n.wake()
	return n.raft.ReadIndex(ctx, rctx)
}

// Step hands a message from a peer to raft. A proposal a peer forwarded is
// dropped at once while this node knows no leader (raft takes proposals only
// with a leader, and would block the peer's whole inbound stream, heartbeats
// and votes included, behind it), and otherwise waits at most an election
// timeout; the forwarder's waiter then times out and its client retries.
// Every message but an idle heartbeat wakes a quiesced group (wakesGroup).
func (n *Node) Step(ctx context.Context, m raftpb.Message) error {
	if n.wakesGroup(&m) {
		n.wake()
	}
	if m.Type == raftpb.MsgProp {
		if n.leader.Load() == raft.None {
			return raft.ErrProposalDropped
		}
		return n.stepWithin(ctx, m, time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval)
	}
	return n.raft.Step(ctx, m)
}

// stepWithin steps m into raft, waiting at most d of the node's clock: as
// context.WithTimeout, but on the injected clock.
func (n *Node) stepWithin(ctx context.Context, m raftpb.Message, d time.Duration) error {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := n.cfg.Clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	defer timer.Stop()
	defer cancel(nil)
	err := n.raft.Step(ctx, m)
	if errors.Is(err, context.Canceled) && context.Cause(ctx) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// TransferLeadership asks the current leader to hand over to transferee.
func (n *Node) TransferLeadership(ctx context.Context, transferee uint64) {
	n.wake()
	n.raft.TransferLeadership(ctx, n.raft.Status().Lead, transferee)
}

// ReportUnreachable and ReportSnapshot relay transport feedback to raft.
func (n *Node) ReportUnreachable(id uint64) { n.raft.ReportUnreachable(id) }

// ReportSnapshot tells raft how sending a snapshot to id ended.
func (n *Node) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	n.wake()
	n.raft.ReportSnapshot(id, status)
}

// Status returns raft's view of the group.
func (n *Node) Status() raft.Status { return n.raft.Status() }

// LastTick is when the Ready loop last took a tick (when the node started,
// before the first tick): it advanced raft's clock, or, the group being
// quiesced, let it stand. A reading of Config.Clock, to be measured with
// that clock's Since; it stands still only while the loop is stuck (a
// stalled disk), quiesced or not.
func (n *Node) LastTick() time.Time { return n.started.Add(time.Duration(n.lastTick.Load())) }

// Done is closed when the Ready loop has stopped; Err says why.
func (n *Node) Done() <-chan struct{} { return n.donec }

// Err returns the fatal error that stopped the node, or nil.
func (n *Node) Err() error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.err
}

// Stop stops the Ready loop and waits for it (and any snapshot in flight).
func (n *Node) Stop() {
	select {
	case <-n.stopc:
	default:
		close(n.stopc)
	}
	<-n.donec
}

func (n *Node) fail(err error) {
	n.errMu.Lock()
	if n.err == nil {
		n.err = err
	}
	n.errMu.Unlock()
	n.log.Error("raft node stopping on fatal error", "err", err)
}
