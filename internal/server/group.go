package server

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/watch"
)

// group is one consensus group on this server: its raft node, its state
// machine and the waiters of proposals and reads made through this server.
// It implements raftnode.StateMachine and raftnode.Observer; those methods
// run on the node's Ready loop.
type group struct {
	id     uint64
	server *Server
	node   *raftnode.Node // set once, after the node started

	mu  sync.RWMutex // guards fsm: written by the Ready loop, read by requests
	fsm *fsm.FSM

	applied   atomic.Uint64 // the fsm's applied index, published after the state is visible
	appliedMu sync.Mutex
	appliedCh chan struct{} // guarded by appliedMu: closed and replaced whenever applied grows

	leader atomic.Uint64
	term   atomic.Uint64

	waiters  *waiterTable
	reads    *readBatcher
	sessions *sessionTracker
	// deletions wakes lock waiters when the node ahead of them is deleted.
	deletions *deletionWaiters
	// watches fires clients' watches at apply time, on this server only.
	watches *watch.Registry
}

func newGroup(s *Server, id uint64) *group {
	g := &group{
		id:        id,
		server:    s,
		fsm:       fsm.New(),
		appliedCh: make(chan struct{}),
		waiters:   newWaiterTable(),
		sessions:  newSessionTracker(),
		deletions: newDeletionWaiters(),
		watches: watch.New(watch.Options{
			MaxPerSession: s.cfg.MaxWatchesPerSession, QueueLen: s.cfg.WatchQueueLen, RequireStream: true,
		}),
	}
	g.reads = newReadBatcher(g)
	return g
}

// Apply applies committed entries to the state machine and answers the
// waiters of the proposals among them. An entry that does not decode stops
// it: the entries before it are applied and published, none after, and the
// error (an *UndecodableEntryError) stops the node, then the server.
func (g *group) Apply(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	outcomes := make([]outcome, 0, len(entries))
	var events []fsm.Event
	var failure error
	last := uint64(0) // the last entry applied
	g.mu.Lock()
	for _, e := range entries {
		o, evs, err := g.applyEntryLocked(e)
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
	// Published under the write lock, so a watch registered under the read
	// lock sees history and state at the same index.
	g.watches.Publish(events)
	g.mu.Unlock()
	g.deletions.deleted(events)
	if last != 0 {
		g.publishApplied(last)
		g.server.metrics.applied(last)
	}
	for _, o := range outcomes {
		g.waiters.resolve(o)
	}
	return failure
}

// applyEntryLocked applies one committed normal entry; g.mu must be held.
// It returns the outcome for the entry's waiter (id 0: none) and the
// events, or an error if the entry does not decode, having changed nothing.
func (g *group) applyEntryLocked(e raftpb.Entry) (outcome, []fsm.Event, error) {
	if len(e.Data) == 0 {
		g.fsm.Advance(e.Index)
		return outcome{}, nil, nil
	}
	cmd, err := command.Unmarshal(e.Data)
	if err != nil {
		// Skipping it would be safe only if every replica failed alike; one
		// running another binary may decode it and diverge. Stop instead.
		return outcome{}, nil, &UndecodableEntryError{Group: g.id, Index: e.Index, Err: err}
	}
	if cmd.Op == command.OpSessionExpire && cmd.LeaderTerm != e.Term {
		// Decided by a leader of another term (a deposed one whose
		// proposal raft forwarded): void, on every replica alike.
		g.fsm.Advance(e.Index)
		return outcome{id: cmd.ID, index: e.Index, err: errVoidExpiry}, nil, nil
	}
	res, evs := g.fsm.Apply(e.Index, &cmd)
	g.trackApplied(&cmd, res)
	return outcome{id: cmd.ID, index: e.Index, result: res}, evs, nil
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

// ApplyConfChange records membership changes: peers get a transport route
// and a member record in the state machine at the same index on every
// replica; the proposer's waiter, if on this server, gets the index.
func (g *group) ApplyConfChange(index uint64, cc raftpb.ConfChangeV2, cs raftpb.ConfState) error {
	context, err := decodeConfContext(cc.Context)
	if err != nil {
		return &UndecodableEntryError{Group: g.id, Index: index, Err: fmt.Errorf("conf change context: %w", err)}
	}
	g.mu.Lock()
	// latch proposes one change per entry (the state machine takes one
	// command per index); raft's bootstrap entries are single changes too.
	if len(cc.Changes) > 0 {
		g.applyMemberChange(index, cc.Changes[0], context)
	}
	if len(cc.Changes) > 1 {
		g.server.log.Error("conf change with several changes: only the first is recorded", "index", index)
	}
	g.fsm.Advance(index)
	g.mu.Unlock()
	g.publishApplied(index)
	if context.Proposal != 0 {
		g.waiters.resolve(outcome{id: context.Proposal, index: index})
	}
	for _, ch := range cc.Changes {
		if ch.Type == raftpb.ConfChangeRemoveNode && ch.NodeID == g.server.id {
			go g.server.removed()
		}
	}
	return nil
}

// applyMemberChange must be called with g.mu held.
func (g *group) applyMemberChange(index uint64, ch raftpb.ConfChangeSingle, context confContext) {
	s := g.server
	switch ch.Type {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		m := context.Member
		if m.ID != ch.NodeID {
			// A promotion carries no address: keep the recorded one.
			m, _ = g.fsm.Member(ch.NodeID)
			m.ID = ch.NodeID
		}
		m.Learner = ch.Type == raftpb.ConfChangeAddLearnerNode
		g.fsm.Apply(index, &command.Command{Op: command.OpMemberSet, Member: m})
		if m.ID != s.id && m.PeerURL != "" {
			s.transport.AddPeer(m.ID, m.PeerURL)
		}
	case raftpb.ConfChangeRemoveNode:
		g.fsm.Apply(index, &command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: ch.NodeID}})
		if ch.NodeID != s.id {
			// The route stays, so the member can be told it was removed
			// (raft sends it nothing more; see Server.tellRemoved).
			s.removedPeers.add(ch.NodeID)
		}
	}
}

// Snapshot clones the state in O(1); the clone is written on another
// goroutine. Cloning marks the original's tree nodes shared, so it takes the
// write lock like Apply.
func (g *group) Snapshot() func(io.Writer) error {
	g.mu.Lock()
	clone := g.fsm.Clone()
	g.mu.Unlock()
	return clone.WriteSnapshot
}

// Restore replaces the state machine with a snapshot's.
func (g *group) Restore(meta snap.Meta, body io.Reader) error {
	f, err := fsm.ReadSnapshot(body)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.fsm = f
	members := f.Members()
	g.sessions.reset(f.Sessions(), time.Now())
	g.watches.Restored(meta.Index)
	g.mu.Unlock()
	for _, m := range members {
		if m.ID != g.server.id && m.PeerURL != "" {
			g.server.transport.AddPeer(m.ID, m.PeerURL)
		}
	}
	g.publishApplied(meta.Index)
	// Entries the snapshot covered were never applied here: their waiters
	// get "outcome unknown", and lock waiters look at the new state.
	g.waiters.failAll(g.unavailable("state replaced by a snapshot while the write was pending; its outcome is unknown"))
	g.deletions.wakeAll()
	return nil
}

// LeaderChanged fails every waiting proposal when a known leader is lost or
// replaced: it may have dropped them, so their outcome is unknown. Learning
// a leader after none fails nothing: proposals wait in raft until then.
func (g *group) LeaderChanged(leader, term uint64) {
	// Deadlines are renewed before this server shows itself as leader, so the
	// expiry loop never sees a leader with a follower's stale deadlines.
	if leader == g.server.id {
		g.sessions.lead(time.Now(), term)
	} else {
		g.sessions.follow()
	}
	g.term.Store(term)
	previous := g.leader.Swap(leader)
	g.server.metrics.leaderChanged(leader, term)
	// A new leader gets the staleness window to acknowledge a first relay.
	g.sessions.relayAcked.Store(time.Now().UnixNano())
	if previous != raft.None {
		g.waiters.failAll(api.Errorf(api.CodeUnavailable, "leader changed while the write was pending; its outcome is unknown"))
	}
}

// ReadStates hands ReadIndex answers to the read batcher without blocking.
func (g *group) ReadStates(states []raft.ReadState) {
	for _, st := range states {
		select {
		case g.reads.states <- st:
		default:
			g.server.log.Warn("dropping read state: batcher is not keeping up", "index", st.Index)
		}
	}
}

// publishApplied makes index visible to waitApplied.
func (g *group) publishApplied(index uint64) {
	if index <= g.applied.Load() {
		return
	}
	g.applied.Store(index)
	g.appliedMu.Lock()
	close(g.appliedCh)
	g.appliedCh = make(chan struct{})
	g.appliedMu.Unlock()
}

// appliedChanged returns a channel closed at the next growth of applied.
func (g *group) appliedChanged() <-chan struct{} {
	g.appliedMu.Lock()
	defer g.appliedMu.Unlock()
	return g.appliedCh
}

// view runs fn with the state machine locked for reading and returns the
// applied index fn saw.
func (g *group) view(fn func(f *fsm.FSM)) uint64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	fn(g.fsm)
	return g.fsm.Applied()
}

// leaderHint is the leader's client address, if known.
func (g *group) leaderHint() string {
	lead := g.leader.Load()
	if lead == raft.None {
		return ""
	}
	var hint string
	g.view(func(f *fsm.FSM) {
		m, _ := f.Member(lead)
		hint = m.ClientURL
	})
	return hint
}

// unavailable returns a 503 error carrying the leader hint.
func (g *group) unavailable(format string, args ...any) error {
	e := api.Errorf(api.CodeUnavailable, format, args...)
	e.LeaderHint = g.leaderHint()
	return e
}
