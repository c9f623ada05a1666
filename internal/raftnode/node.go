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
	"github.com/latch-io/latch/internal/timeline"
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

	// Clock drives raft's logical clock (a ticker of TickInterval),
	// LastTick and the hook durations.
	// Default clock.Real(); tests step ticks by advancing a clock.Fake.
	Clock        clock.Clock
	TickInterval time.Duration // default 100ms
	// Ticker, if set, drives raft's clock instead of a ticker of the node's
	// own: one shared by every group of the process (its interval is then
	// the Ticks').
	Ticker        *Ticks
	ElectionTicks int // default 10
	HeartbeatTick int // default 1
	// SnapshotEvery is how many applied entries trigger a snapshot (default
	// 100,000, as etcd's and ZooKeeper's defaults: a snapshot writes the
	// whole state, so its cost per write is the state's size over this).
	SnapshotEvery uint64
	// SnapshotBytes triggers a snapshot before SnapshotEvery entries once the
	// data of the entries applied since the last one reaches it (default
	// 64 MiB): it bounds the raft log kept in memory and replayed at start
	// when entries are large.
	SnapshotBytes uint64
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
	storage *memLog
	log     *slog.Logger

	// mu guards raft, the group's RawNode, and stopped: every call into raft
	// is a short critical section under it, on the caller's goroutine, and
	// none does I/O while holding it (see "Locking" in the package comment).
	mu      sync.Mutex
	raft    *raft.RawNode // guarded by mu
	stopped bool          // guarded by mu: the Ready loop has returned
	// proposalsHeld is set when this node applied a conf change removing
	// it, and cleared when a leader is seen: proposals then wait for a
	// leader, as raft.Node's did.
	proposalsHeld bool // guarded by mu
	// openBatch collects the normal proposals made until one of their
	// proposers takes the lock and steps them all (proposals.go).
	batchMu   sync.Mutex
	openBatch *proposalBatch // guarded by batchMu
	// waiting is the batches not stepped yet, oldest first (the open
	// batch is the last, if there is one): stepping one steps those before
	// it first (stepThroughLocked), so proposals reach raft in the order
	// they joined. Guarded by batchMu.
	waiting []*proposalBatch
	// notifyc has a slot signalled after something was stepped into raft,
	// to wake the Ready loop; notices sent while the loop is busy merge,
	// and what they stepped leaves in one Ready.
	notifyc chan struct{}
	// leaderWait, if not nil, is closed by the Ready loop when it sees a
	// leader: proposals made while none is known wait on it.
	leaderMu   sync.Mutex
	leaderWait chan struct{} // guarded by leaderMu
	// readys counts the Readys the loop took, stepped the messages and
	// proposals callers stepped into raft: their ratio shows how much one
	// Ready carries.
	readys  atomic.Uint64
	stepped atomic.Uint64
	// deferredJoined and deferredAlone count the deferred proposals
	// (ProposeDeferred) another proposal took along, and those that left
	// by themselves once their delay passed.
	deferredJoined atomic.Uint64
	deferredAlone  atomic.Uint64

	stopc chan struct{}
	donec chan struct{}

	// appender makes entries durable on a goroutine of its own; appendStop
	// is closed by the Ready loop when it returns, to stop it.
	appender   *appender
	acks       *ackDeferral // a follower's acknowledgements held back (acks.go)
	appendStop chan struct{}
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
	// appliedBytes is the data of the entries applied since the last
	// snapshot began (or was restored): see Config.SnapshotBytes.
	appliedBytes uint64
	snapshotting bool
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
		storage:  newMemLog(),
		log:      cfg.Logger.With("group", cfg.Group),
		stopc:    make(chan struct{}),
		donec:    make(chan struct{}),
		snapDone: make(chan snapshotResult, 1),

		appendStop: make(chan struct{}),
		progress:   make(chan struct{}, 1),
		notifyc:    make(chan struct{}, 1),
	}
	n.appender = newAppender(n)
	n.acks = newAckDeferral()
	restarted, err := n.recover()
	if err != nil {
		return nil, err
	}
	if n.raft, err = raft.NewRawNode(n.raftConfig()); err != nil {
		return nil, fmt.Errorf("raftnode: group %d: start raft: %w", cfg.Group, err)
	}
	if !restarted && !cfg.Join {
		if len(cfg.Peers) == 0 {
			return nil, fmt.Errorf("raftnode: group %d has no state and no peers to bootstrap", cfg.Group)
		}
		if err := n.raft.Bootstrap(cfg.Peers); err != nil {
			return nil, fmt.Errorf("raftnode: group %d: bootstrap: %w", cfg.Group, err)
		}
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
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
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

// Propose proposes data as a normal entry. It returns once raft took the
// proposal here (appended it, leading, or forwarded it to the leader), not
// once committed. While no leader is known it waits for one until ctx ends,
// as raft.Node did; raft.ErrProposalDropped when raft refuses it with a
// leader known (the leader here is transferring leadership): the entry was
// never appended, so the caller may propose it again. Proposals made while
// another holds the lock are stepped together, in one MsgProp (see
// proposalBatch).
func (n *Node) Propose(ctx context.Context, data []byte) error {
	return n.ProposePlaced(ctx, data, nil)
}

// Placement is told when a proposal has its place in this node's order of
// proposals (see ProposePlaced).
type Placement interface{ Placed() }

// ProposePlaced is Propose for one of a sequence of writes that must reach
// raft in order (a client connection's ordered stream): p, if not nil, is
// told as soon as data has joined the open batch, before the batch is
// stepped. Batches are stepped in the order they were opened, so a
// proposal made after Placed reaches raft after this one, in the same
// batch or a later one: the caller may make the next write's proposal
// then, and it can join this batch instead of waiting for it to be
// stepped (with one processor a member, a connection's pipelined writes
// then leave in one MsgProp instead of one each). Should raft refuse the
// batch (no leader, a leadership transfer, the leader's uncommitted
// entries past MaxUncommittedEntriesSize under a stalled disk, or this
// node removed and holding proposals), each of its proposals is proposed
// again by its own caller, in no set order, each joining whatever batch is
// open then: the caller must be able to tell (the state machine's stream
// order refuses a write whose predecessor it has not applied, and the
// client's connection ends). Placed may be called again for each attempt.
func (n *Node) ProposePlaced(ctx context.Context, data []byte, p Placement) error {
	return n.proposeWhenLed(ctx, func() (bool, error) { return n.stepBatched(data, p) })
}

// ProposeDeferred proposes data as Propose does, but lets it wait up to
// delay for company: on the leader it joins the open batch, which the next
// proposal made here steps (or the next one a follower forwards here), and
// steps it itself only once delay has passed; a follower forwards it at
// once, marked with the delay (at most maxForwardedDeferral), and the
// leader holds it so (holdForwarded). It is for a write whose outcome is
// not needed at once (a place at the back of a lock's queue behind others),
// so that it shares a WAL save with the next write instead of taking one
// of its own. Tried again after raft held or dropped it for want of a
// leader, it does not wait a second time. A leader that steps down while
// holding a follower's entries proposes them to the next leader after
// their delay: a write of the same client connection forwarded meanwhile
// may reach raft first, and the connection's stream then refuses it
// (replica.Stream), as when a forwarded proposal is lost.
// p, if not nil, is told once data has its place, as with ProposePlaced.
func (n *Node) ProposeDeferred(ctx context.Context, data []byte, delay time.Duration, p Placement) error {
	wait := true
	return n.proposeWhenLed(ctx, func() (bool, error) {
		if wait {
			wait = false
			return n.stepDeferred(data, delay, p)
		}
		return n.stepBatched(data, p)
	})
}

// ProposeConfChange proposes a membership change, waiting for a leader as
// Propose does. It is stepped alone.
func (n *Node) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	typ, data, err := raftpb.MarshalConfChange(cc)
	if err != nil {
		return fmt.Errorf("raftnode: group %d: encode conf change: %w", n.cfg.Group, err)
	}
	m := raftpb.Message{Type: raftpb.MsgProp, From: n.cfg.ID, Entries: []raftpb.Entry{{Type: typ, Data: data}}}
	return n.proposeWhenLed(ctx, func() (bool, error) { return n.stepProposal(m) })
}

// proposeWhenLed steps a proposal into raft with step, and while raft drops
// it for want of a leader (or this node was removed from the group), waits
// for the Ready loop to see a leader and steps it again.
func (n *Node) proposeWhenLed(ctx context.Context, step func() (held bool, err error)) error {
	n.wake()
	for {
		held, err := step()
		if !held && (!errors.Is(err, raft.ErrProposalDropped) || n.leader.Load() != raft.None) {
			return err
		}
		next := n.nextLeader()
		if !n.holdingProposals() && n.leader.Load() != raft.None {
			continue // a leader came between the step and nextLeader
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.donec:
			return ErrStopped
		}
	}
}

// stepProposal steps the proposal m into raft, unless proposals are held
// (held: this node was removed and has seen no leader since).
func (n *Node) stepProposal(m raftpb.Message) (held bool, err error) {
	held, err = n.stepLocked(func() (bool, error) { return n.stepProposalLocked(m) })
	if err == nil && !held {
		n.stepped.Add(1)
		n.notify()
	}
	return held, err
}

// stepProposalLocked steps m into raft unless proposals are held; n.mu
// must be held.
func (n *Node) stepProposalLocked(m raftpb.Message) (held bool, err error) {
	if n.proposalsHeld {
		return true, nil
	}
	return false, n.raft.Step(m)
}

// stepLocked runs f under the lock, or returns ErrStopped once the loop
// has returned. The lock is released however f ends: raft reports a
// broken invariant by panicking, on whatever goroutine stepped it (an HTTP
// handler's, whose panic net/http recovers), and a lock left held would
// hang the group silently.
func (n *Node) stepLocked(f func() (bool, error)) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return false, ErrStopped
	}
	return f()
}

// holdingProposals reports whether proposals are held (proposalsHeld).
func (n *Node) holdingProposals() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proposalsHeld
}

// nextLeader returns a channel closed the next time the Ready loop sees a
// leader (leaderSeen).
func (n *Node) nextLeader() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if n.leaderWait == nil {
		n.leaderWait = make(chan struct{})
	}
	return n.leaderWait
}

// leaderSeen is called by the Ready loop after it stored a new leader (not
// raft.None) in n.leader: proposals held since a removal go through again,
// and those waiting for a leader are proposed again.
func (n *Node) leaderSeen() {
	n.mu.Lock()
	n.proposalsHeld = false
	n.mu.Unlock()
	n.leaderMu.Lock()
	if n.leaderWait != nil {
		close(n.leaderWait)
		n.leaderWait = nil
	}
	n.leaderMu.Unlock()
}

// ReadIndex asks for a read index tagged rctx; the answer arrives through
// Observer.ReadStates.
func (n *Node) ReadIndex(_ context.Context, rctx []byte) error {
	n.wake()
	return n.withRaft(func(rn *raft.RawNode) { rn.ReadIndex(rctx) })
}

// Step hands a message from a peer to raft. A proposal a peer forwarded is
// dropped at once while this node knows no leader (raft takes proposals only
// with a leader; the forwarder's waiter times out and its client retries),
// and raft's refusal of one is returned. Other messages raft refuses (a
// response from a peer not in the group) are dropped silently, as raft.Node
// did. Every message but an idle heartbeat wakes a quiesced group
// (wakesGroup). A forwarded proposal takes along, ahead of it, the
// batches of proposals made here and not yet stepped (the deferred ones of
// ProposeDeferred among them): all leave in one Ready.
// A forwarded deferred proposal is held in the open batch while this node
// leads (holdForwarded).
func (n *Node) Step(_ context.Context, m raftpb.Message) error {
	markStep(&m)
	if n.wakesGroup(&m) {
		n.wake()
	}
	if m.Type == raftpb.MsgProp {
		if n.leader.Load() == raft.None {
			return raft.ErrProposalDropped
		}
		// raft forwards a proposal it cannot take with the sender it
		// carries; from here on it is this node's (as raft.Node made it):
		// the next hop's transport refuses a message whose sender is not
		// the connection's peer.
		m.From = n.cfg.ID
		if delay, ok := forwardedDeferral(&m); ok && n.leader.Load() == n.cfg.ID {
			n.holdForwarded(m.Entries, delay)
			return nil
		}
	}
	var dones []chan struct{}
	along := 0
	_, err := n.stepLocked(func() (bool, error) {
		if m.Type == raftpb.MsgProp {
			// The batches waiting here leave in the same Ready, and
			// before it: a client connection's later write may be in m.
			dones, along = n.stepThroughLocked(nil, false)
		}
		return false, n.raft.Step(m)
	})
	for _, done := range dones {
		close(done)
	}
	if errors.Is(err, ErrStopped) {
		return err
	}
	n.stepped.Add(uint64(1 + along))
	n.notify()
	if m.Type == raftpb.MsgProp {
		return err
	}
	return nil
}

// withRaft runs f on the RawNode under the lock and wakes the Ready loop;
// ErrStopped once the loop has returned.
func (n *Node) withRaft(f func(rn *raft.RawNode)) error {
	if _, err := n.stepLocked(func() (bool, error) { f(n.raft); return false, nil }); err != nil {
		return err
	}
	n.notify()
	return nil
}

// notify wakes the Ready loop: raft may have a Ready. It never blocks.
func (n *Node) notify() {
	select {
	case n.notifyc <- struct{}{}:
	default:
	}
}

// TransferLeadership asks the current leader to hand over to transferee.
func (n *Node) TransferLeadership(_ context.Context, transferee uint64) {
	n.wake()
	_ = n.withRaft(func(rn *raft.RawNode) { rn.TransferLeader(transferee) })
}

// ReportUnreachable and ReportSnapshot relay transport feedback to raft.
func (n *Node) ReportUnreachable(id uint64) {
	_ = n.withRaft(func(rn *raft.RawNode) { rn.ReportUnreachable(id) })
}

// ReportSnapshot tells raft how sending a snapshot to id ended.
func (n *Node) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	n.wake()
	_ = n.withRaft(func(rn *raft.RawNode) { rn.ReportSnapshot(id, status) })
}

// Status returns raft's view of the group (empty once the node stopped).
// It copies every member's progress under the lock: not for a per-operation
// path.
func (n *Node) Status() raft.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return raft.Status{}
	}
	return n.raft.Status()
}

// Deferrals reports how many deferred proposals (ProposeDeferred) left
// with another proposal, and how many by themselves after their delay.
func (n *Node) Deferrals() (joined, alone uint64) {
	return n.deferredJoined.Load(), n.deferredAlone.Load()
}

// Batching reports how many Readys the loop took and how many messages
// callers stepped into raft (peer messages, proposals): the second over the
// first is how much a Ready carries.
func (n *Node) Batching() (readys, stepped uint64) {
	return n.readys.Load(), n.stepped.Load()
}

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

// markStep records a peer's message in the write timeline (a measuring
// tool compiled in only with the build tag latchtimeline).
func markStep(m *raftpb.Message) {
	if !timeline.Enabled {
		return
	}
	switch {
	case m.Type == raftpb.MsgApp && len(m.Entries) > 0:
		timeline.Mark(timeline.AppendStepped)
	case m.Type == raftpb.MsgAppResp:
		timeline.Mark(timeline.AckStepped)
	}
}
