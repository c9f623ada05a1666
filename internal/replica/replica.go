package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/snap"
)

// Config is what a Replica needs from the server that runs it.
type Config struct {
	Self  uint64 // this member's raft id
	Group uint64 // the consensus group's id
	// Shard and Shards say which shard of how many the group holds: its
	// state machine is fsm.NewShard(Shard, Shards) and restores only a
	// snapshot of that shard. Shards 0 means 1 (one group, fsm.New).
	Shard, Shards int

	RequestTimeout  time.Duration // deadline of a proposal or a read barrier
	ElectionTimeout time.Duration // paces proposal and ReadIndex retries
	MaxPending      int           // proposals waiting at once before 429
	// UnsafeLocalReads serves linearizable reads without a ReadIndex round
	// (the planted stale-read bug of the checker tests).
	UnsafeLocalReads bool

	// Listeners are told what was applied, in this order (see the package
	// comment).
	Listeners  []Listener
	Membership Membership // default: told nothing
	Metrics    Metrics    // default: none
	Clock      clock.Clock
	Logger     *slog.Logger
	// Stop closes when the server stops: pending reads answer 503.
	Stop <-chan struct{}
}

// ErrStopping is the 503 of requests made while the server stops.
var ErrStopping = api.Errorf(api.CodeUnavailable, "server is stopping")

// Replica is one consensus group on this server: its raft node, its state
// machine and the waiters of proposals and reads made through this server.
// It implements raftnode.StateMachine and raftnode.Observer; those methods
// run on the node's Ready loop.
type Replica struct {
	cfg  Config
	node *raftnode.Node // set once by Attach, after the node started

	mu  sync.RWMutex // guards fsm: written by the Ready loop, read by requests
	fsm *fsm.FSM
	// applying holds the command of the entry being applied, and txnOps
	// the array its transaction's operations are decoded into (guarded by
	// mu): decoded into again for each entry, so decoding allocates only
	// the command's strings and lists. Nothing keeps a pointer into either
	// past the entry's apply.
	applying command.Command
	txnOps   []command.TxnOp
	// outcomes is Apply's scratch list of the waiters to answer, kept
	// between calls (Apply runs on the Ready loop only).
	outcomes []outcome
	// events is Apply's list of a batch's events, kept the same way
	// (the listeners keep copies, never the slice), unless a batch grew
	// it past maxKeptEvents.
	events []fsm.Event

	applied   atomic.Uint64 // the fsm's applied index, published after the state is visible
	appliedMu sync.Mutex
	appliedCh chan struct{} // guarded by appliedMu: closed and replaced whenever applied grows

	leader atomic.Uint64
	term   atomic.Uint64

	waiters *waiterTable
	reads   *readBatcher
}

// New returns a Replica with an empty state machine of its shard; start its
// raft node with it as Machine and Observer, then Attach the node. A shard
// outside 0..Shards-1 is an error.
func New(cfg Config) (*Replica, error) {
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	state, err := fsm.NewShard(cfg.Shard, cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("replica: group %d: %w", cfg.Group, err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	if cfg.Membership == nil {
		cfg.Membership = nopMembership{}
	}
	r := &Replica{
		cfg:       cfg,
		fsm:       state,
		appliedCh: make(chan struct{}),
		waiters:   newWaiterTable(),
	}
	r.reads = newReadBatcher(r)
	return r, nil
}

// Attach gives the Replica its started raft node, before any request.
func (r *Replica) Attach(node *raftnode.Node) { r.node = node }

// RunReads runs the ReadIndex rounds of batched reads until Config.Stop
// closes; the server runs it on a goroutine of its own.
func (r *Replica) RunReads() { r.reads.loop(r.cfg.Stop) }

// LastTick is when the Ready loop last advanced raft's clock, a reading of
// Config.Clock (the raft node must run on the same clock).
func (r *Replica) LastTick() time.Time { return r.node.LastTick() }

// Node is the group's raft node.
func (r *Replica) Node() *raftnode.Node { return r.node }

// Group is the consensus group's id.
func (r *Replica) Group() uint64 { return r.cfg.Group }

// Leader is the raft id of the leader this replica follows (0: none known).
func (r *Replica) Leader() uint64 { return r.leader.Load() }

// Term is the term of the last leader change seen.
func (r *Replica) Term() uint64 { return r.term.Load() }

// Applied is the state machine's published applied index.
func (r *Replica) Applied() uint64 { return r.applied.Load() }

// Apply applies committed entries to the state machine, notifies the
// listeners and answers the waiters of the proposals among them, in the
// order the package comment gives. An entry that does not decode stops it:
// the entries before it are applied and published, none after, and the
// error (an *UndecodableEntryError) stops the node, then the server.
func (r *Replica) Apply(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	outcomes := r.outcomes[:0]
	events := r.events[:0]
	var failure error
	last := uint64(0) // the last entry applied
	r.mu.Lock()
	for _, e := range entries {
		o, evs, err := r.applyEntryLocked(e)
		if err != nil {
			failure = err
			break
		}
		last = e.Index
		events = append(events, evs...)
		if o.id != 0 {
			outcomes = append(outcomes, o)
		}
	}
	// The last entry's values go with it; the operations' array stays.
	r.applying = command.Command{}
	clear(r.txnOps[:cap(r.txnOps)])
	// Published under the write lock, so a watch registered under the read
	// lock sees history and state at the same index.
	for _, l := range r.cfg.Listeners {
		l.PublishLocked(events)
	}
	r.mu.Unlock()
	for _, l := range r.cfg.Listeners {
		l.Applied(events)
	}
	if last != 0 {
		r.publishApplied(last)
		r.cfg.Metrics.Applied(last)
	}
	for _, o := range outcomes {
		r.waiters.resolve(o)
	}
	clear(outcomes) // let the results go
	r.outcomes = outcomes[:0]
	if cap(events) <= maxKeptEvents {
		clear(events) // their paths
		r.events = events[:0]
	}
	return failure
}

// applyEntryLocked applies one committed normal entry; r.mu must be held.
// It returns the outcome for the entry's waiter (id 0: none) and the
// events, or an error if the entry does not decode, having changed nothing.
func (r *Replica) applyEntryLocked(e raftpb.Entry) (outcome, []fsm.Event, error) {
	if len(e.Data) == 0 {
		r.fsm.Advance(e.Index)
		return outcome{}, nil, nil
	}
	cmd := &r.applying
	var err error
	if *cmd, err = command.UnmarshalReusing(e.Data, r.txnOps); err != nil {
		// Skipping it would be safe only if every replica failed alike; one
		// running another binary may decode it and diverge. Stop instead.
		return outcome{}, nil, &UndecodableEntryError{Group: r.cfg.Group, Index: e.Index, Err: err}
	}
	if cap(cmd.Ops) > cap(r.txnOps) {
		r.txnOps = cmd.Ops[:0] // a larger transaction: keep its array
	}
	if cmd.Op == command.OpSessionExpire && cmd.LeaderTerm != e.Term {
		// Decided by a leader of another term (a deposed one whose
		// proposal raft forwarded): void, on every replica alike.
		r.fsm.Advance(e.Index)
		return outcome{id: cmd.ID, index: e.Index, err: ErrVoidExpiry}, nil, nil
	}
	if cmd.Op == command.OpMemberSet && !r.fromMemberTableLocked(&cmd.Member) {
		r.fsm.Advance(e.Index)
		return outcome{id: cmd.ID, index: e.Index, err: ErrNoMemberRecord}, nil, nil
	}
	res, evs := r.fsm.Apply(e.Index, cmd)
	for _, l := range r.cfg.Listeners {
		l.AppliedLocked(cmd, res)
	}
	return outcome{id: cmd.ID, index: e.Index, result: res}, evs, nil
}

// maxKeptEvents bounds the events list Apply keeps between batches: a
// batch that deleted a large subtree does not leave its list behind.
const maxKeptEvents = 4096

// ErrVoidExpiry answers an expiry decided in a term other than the one its
// entry was appended in: it changes nothing.
var ErrVoidExpiry = api.Errorf(api.CodeUnavailable, "session expiry decided in another term; void")

// ErrNoMemberRecord answers a proposed member record (a member announcing
// its addresses) for an id the member table does not hold: only conf
// changes add members, so it changes nothing.
var ErrNoMemberRecord = api.Errorf(api.CodePreconditionFailed, "no member with this id: members are added by conf changes only")

// fromMemberTableLocked makes a proposed member record (OpMemberSet in a
// normal entry: a member announcing its addresses) keep what conf changes
// own: it is refused unless the member table holds the id, and its Learner
// flag is the table's. The announcer's own view of its role can be behind
// (a joiner that has not applied its learner conf change yet reads itself a
// voter; a promotion can commit between the announcement's proposal and its
// apply), and a member listed as a voter while raft has it as a learner
// would be promoted in the shard groups. Decided from replicated state
// alone, so alike on every replica. r.mu must be held.
func (r *Replica) fromMemberTableLocked(m *command.Member) bool {
	recorded, ok := r.fsm.Member(m.ID)
	if !ok {
		return false
	}
	m.Learner = recorded.Learner
	return true
}

// ErrUndecodableEntry matches (errors.Is) every *UndecodableEntryError.
var ErrUndecodableEntry = errors.New("server: committed entry does not decode")

// UndecodableEntryError is the fatal error of a replica that met a committed
// entry it cannot decode (written by a binary with another command format,
// or corrupt): it stopped before applying it.
type UndecodableEntryError struct {
	Group uint64 // the consensus group
	Index uint64 // the entry's raft index
	Err   error  // why it does not decode
}

func (e *UndecodableEntryError) Error() string {
	return fmt.Sprintf("server: committed entry at raft index %d (group %d) does not decode, so this replica stopped before applying it: %v", e.Index, e.Group, e.Err)
}

// Unwrap returns ErrUndecodableEntry and the decoding error.
func (e *UndecodableEntryError) Unwrap() []error { return []error{ErrUndecodableEntry, e.Err} }

// confContext rides in a conf change's Context: the member's addresses and
// the id of the proposal waiting for it.
type confContext struct {
	Member   command.Member `json:"member"`
	Proposal uint64         `json:"proposal,omitempty"`
}

func encodeConfContext(c confContext) []byte {
	b, _ := json.Marshal(c)
	return b
}

func decodeConfContext(b []byte) (confContext, error) {
	var c confContext
	if len(b) == 0 {
		return c, nil
	}
	err := json.Unmarshal(b, &c)
	return c, err
}

// BootstrapPeer is the raft peer of an initial member, with its addresses in
// the conf change context so every replica records them in its state machine.
func BootstrapPeer(m command.Member) raft.Peer {
	return raft.Peer{ID: m.ID, Context: encodeConfContext(confContext{Member: m})}
}

// ApplyConfChange records membership changes: peers get a transport route
// and a member record in the state machine at the same index on every
// replica; the proposer's waiter, if on this server, gets the index.
func (r *Replica) ApplyConfChange(index uint64, cc raftpb.ConfChangeV2, cs raftpb.ConfState) error {
	context, err := decodeConfContext(cc.Context)
	if err != nil {
		return &UndecodableEntryError{Group: r.cfg.Group, Index: index, Err: fmt.Errorf("conf change context: %w", err)}
	}
	r.mu.Lock()
	// latch proposes one change per entry (the state machine takes one
	// command per index); raft's bootstrap entries are single changes too.
	if len(cc.Changes) > 0 {
		r.applyMemberChangeLocked(index, cc.Changes[0], context)
	}
	if len(cc.Changes) > 1 {
		r.cfg.Logger.Error("conf change with several changes: only the first is recorded", "index", index)
	}
	r.fsm.Advance(index)
	r.mu.Unlock()
	r.publishApplied(index)
	if context.Proposal != 0 {
		r.waiters.resolve(outcome{id: context.Proposal, index: index})
	}
	for _, ch := range cc.Changes {
		if ch.Type == raftpb.ConfChangeRemoveNode && ch.NodeID == r.cfg.Self {
			go r.cfg.Membership.SelfRemoved()
		}
	}
	return nil
}

// applyMemberChangeLocked must be called with r.mu held.
func (r *Replica) applyMemberChangeLocked(index uint64, ch raftpb.ConfChangeSingle, context confContext) {
	switch ch.Type {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		m := context.Member
		if m.ID != ch.NodeID {
			// A promotion carries no address: keep the recorded one.
			m, _ = r.fsm.Member(ch.NodeID)
			m.ID = ch.NodeID
		}
		m.Learner = ch.Type == raftpb.ConfChangeAddLearnerNode
		r.fsm.Apply(index, &command.Command{Op: command.OpMemberSet, Member: m})
		if m.ID != r.cfg.Self && m.PeerURL != "" {
			r.cfg.Membership.PeerAdded(m.ID, m.PeerURL)
		}
	case raftpb.ConfChangeRemoveNode:
		r.fsm.Apply(index, &command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: ch.NodeID}})
		if ch.NodeID != r.cfg.Self {
			// The route stays, so the member can be told it was removed
			// (raft sends it nothing more; see Membership.PeerRemoved).
			r.cfg.Membership.PeerRemoved(ch.NodeID)
		}
	}
}

// Snapshot clones the state in O(1); the clone is written on another
// goroutine. Cloning marks the original's tree nodes shared, so it takes the
// write lock like Apply.
func (r *Replica) Snapshot() func(io.Writer) error {
	r.mu.Lock()
	clone := r.fsm.Clone()
	r.mu.Unlock()
	return clone.WriteSnapshot
}

// Restore replaces the state machine with a snapshot's, which must be of
// this replica's shard (fsm.ErrWrongShard otherwise).
func (r *Replica) Restore(meta snap.Meta, body io.Reader) error {
	f, err := fsm.ReadShardSnapshot(body, r.cfg.Shard, r.cfg.Shards)
	if err != nil {
		return fmt.Errorf("replica: group %d: restore the snapshot at index %d: %w", r.cfg.Group, meta.Index, err)
	}
	r.mu.Lock()
	r.fsm = f
	members, removed := f.Members(), f.RemovedMembers()
	for _, l := range r.cfg.Listeners {
		l.RestoredLocked(f, meta.Index)
	}
	r.mu.Unlock()
	for _, m := range members {
		if m.ID != r.cfg.Self && m.PeerURL != "" {
			r.cfg.Membership.PeerAdded(m.ID, m.PeerURL)
		}
	}
	r.restoreRemoved(removed)
	r.publishApplied(meta.Index)
	// Entries the snapshot covered were never applied here: their waiters
	// get "outcome unknown", and lock waiters look at the new state.
	r.waiters.failAll(r.Unavailable("state replaced by a snapshot while the write was pending; its outcome is unknown"))
	for _, l := range r.cfg.Listeners {
		l.Restored(meta.Index)
	}
	return nil
}

// restoreRemoved tells Membership of the removals a snapshot records, as
// applying them did: a removed peer keeps an address (to be told it was
// removed if it calls) and is marked removed; a member that finds itself
// removed stops.
func (r *Replica) restoreRemoved(removed []command.Member) {
	for _, m := range removed {
		if m.ID == r.cfg.Self {
			go r.cfg.Membership.SelfRemoved()
			continue
		}
		if m.PeerURL != "" {
			r.cfg.Membership.PeerAdded(m.ID, m.PeerURL)
		}
		r.cfg.Membership.PeerRemoved(m.ID)
	}
}

// LeaderChanged fails every waiting proposal when a known leader is lost or
// replaced: it may have dropped them, so their outcome is unknown. Learning
// a leader after none fails nothing: proposals wait in raft until then.
func (r *Replica) LeaderChanged(leader, term uint64) {
	// Listeners renew deadlines before this server shows itself as leader, so
	// the expiry loop never sees a leader with a follower's stale deadlines.
	for _, l := range r.cfg.Listeners {
		l.LeaderChanging(leader, term)
	}
	r.term.Store(term)
	previous := r.leader.Swap(leader)
	r.cfg.Metrics.LeaderChanged(leader, term)
	for _, l := range r.cfg.Listeners {
		l.LeaderChanged(leader, term)
	}
	if previous != raft.None {
		r.waiters.failAll(api.Errorf(api.CodeUnavailable, "leader changed while the write was pending; its outcome is unknown"))
	}
}

// ReadStates hands ReadIndex answers to the read batcher without blocking.
func (r *Replica) ReadStates(states []raft.ReadState) {
	for _, st := range states {
		select {
		case r.reads.states <- st:
		default:
			r.cfg.Logger.Warn("dropping read state: batcher is not keeping up", "index", st.Index)
		}
	}
}

// publishApplied makes index visible to WaitApplied.
func (r *Replica) publishApplied(index uint64) {
	if index <= r.applied.Load() {
		return
	}
	r.applied.Store(index)
	r.appliedMu.Lock()
	close(r.appliedCh)
	r.appliedCh = make(chan struct{})
	r.appliedMu.Unlock()
}

// appliedChanged returns a channel closed at the next growth of applied.
func (r *Replica) appliedChanged() <-chan struct{} {
	r.appliedMu.Lock()
	defer r.appliedMu.Unlock()
	return r.appliedCh
}

// StateLocked returns the state machine, for an apply listener's Locked
// method, which runs with the write lock held; it must not be kept.
func (r *Replica) StateLocked() *fsm.FSM { return r.fsm }

// View runs fn with the state machine locked for reading and returns the
// applied index fn saw.
func (r *Replica) View(fn func(f *fsm.FSM)) uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.fsm)
	return r.fsm.Applied()
}

// LeaderHint is the leader's client address, if known.
func (r *Replica) LeaderHint() string {
	lead := r.leader.Load()
	if lead == raft.None {
		return ""
	}
	var hint string
	r.View(func(f *fsm.FSM) {
		m, _ := f.Member(lead)
		hint = m.ClientURL
	})
	return hint
}

// Unavailable returns a 503 error carrying the leader hint.
func (r *Replica) Unavailable(format string, args ...any) error {
	e := api.Errorf(api.CodeUnavailable, format, args...)
	e.LeaderHint = r.LeaderHint()
	return e
}

// FailAll answers every pending proposal with err (the server is stopping).
func (r *Replica) FailAll(err error) { r.waiters.failAll(err) }

// Pending is how many proposals wait for their outcome.
func (r *Replica) Pending() int { return r.waiters.len() }
