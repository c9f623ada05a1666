package replica

import (
	"context"
	"crypto/rand"
	"errors"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/timeline"
)

// outcome is what a proposal's waiter receives.
type outcome struct {
	id     uint64
	index  uint64
	result fsm.Result
	err    error
}

// waiterTable matches applied entries to the requests that proposed them.
// Proposal ids are random 64-bit numbers: every server applies every entry,
// so an id must not collide with one another server has in flight (two
// pending proposals share an id with probability about 2^-64).
type waiterTable struct {
	mu      sync.Mutex
	ids     *mathrand.ChaCha8       // guarded by mu
	waiting map[uint64]chan outcome // guarded by mu; each channel has room for one outcome
	// spare holds channels whose waiters received their outcome (recycle).
	spare sync.Pool
}

func newWaiterTable() *waiterTable {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &waiterTable{ids: mathrand.NewChaCha8(seed), waiting: make(map[uint64]chan outcome)}
}

// add registers a new proposal id and returns it with its channel.
func (t *waiterTable) add() (uint64, chan outcome) {
	ch, ok := t.spare.Get().(chan outcome)
	if !ok {
		ch = make(chan outcome, 1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		id := t.ids.Uint64()
		if _, taken := t.waiting[id]; !taken && id != 0 {
			t.waiting[id] = ch
			return id, ch
		}
	}
}

// recycle keeps ch, whose waiter received its outcome from it, for
// another. Only then: each waiter's channel gets exactly one send, by
// resolve or failAll, both of which take it out of the table first; once
// that send was received, nothing else holds the channel or will send on
// it. A waiter that gave up (a deadline) drops its channel instead, since
// a send may still be on its way.
func (t *waiterTable) recycle(ch chan outcome) { t.spare.Put(ch) }

func (t *waiterTable) remove(id uint64) {
	t.mu.Lock()
	delete(t.waiting, id)
	t.mu.Unlock()
}

func (t *waiterTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiting)
}

// resolve delivers o to its waiter, if it is still waiting on this server.
func (t *waiterTable) resolve(o outcome) {
	t.mu.Lock()
	ch, ok := t.waiting[o.id]
	delete(t.waiting, o.id)
	t.mu.Unlock()
	if ok {
		ch <- o
	}
}

// failAll answers every waiter with err.
func (t *waiterTable) failAll(err error) {
	t.mu.Lock()
	waiting := t.waiting
	t.waiting = make(map[uint64]chan outcome)
	t.mu.Unlock()
	for id, ch := range waiting {
		ch <- outcome{id: id, err: err}
	}
}

// Propose replicates cmd and waits until this server applied it. It stamps
// cmd with this server's wall clock (Config.Clock's Wall) unless the caller
// chose cmd.TimeMs: the state machine records that time, carried by the
// log, as the ctime and mtime of the nodes the command writes. The result
// may carry a deterministic refusal in Result.Err; the error is for failures
// (overload, no quorum in time, leader change) whose outcome is unknown.
func (r *Replica) Propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	timeline.Mark(timeline.Propose)
	m := r.cfg.Metrics
	if r.waiters.len() >= r.cfg.MaxPending {
		m.ProposalFailed()
		return fsm.Result{}, 0, api.Errorf(api.CodeOverloaded, "%d proposals pending; retry with backoff", r.cfg.MaxPending)
	}
	turn := turnOf(ctx)
	dl := newDeadline(ctx, r.cfg.RequestTimeout)
	defer dl.stop()
	ctx = dl
	if turn != nil && cmd.SessionID != turn.stream.session {
		turn = nil // not the stream's write (a step of a server protocol)
	}
	defer turn.End()
	if turn != nil {
		if err := turn.wait(dl); err != nil {
			m.ProposalFailed()
			return fsm.Result{}, 0, r.Unavailable("the write before this one on its connection was not proposed within the deadline (not applied)")
		}
		if turn.stamped {
			// A second proposal would take another seq, after writes
			// that followed the first: the stream would refuse it.
			m.ProposalFailed()
			return fsm.Result{}, 0, api.Errorf(api.CodeInternal, "a write of an ordered stream proposed twice")
		}
		turn.stamped = true
		turn.stamp(cmd)
		if turn.lose {
			m.ProposalFailed()
			return fsm.Result{}, 0, r.Unavailable("proposal lost (test hook); outcome unknown")
		}
	}
	id, ch := r.waiters.add()
	defer r.waiters.remove(id)
	cmd.ID = id
	if cmd.TimeMs == 0 {
		cmd.TimeMs = wallMs(r.cfg.Clock.Wall())
	}
	m.ProposalStarted()
	defer m.ProposalEnded()
	data := cmd.Marshal()
	delay := DeferralOf(ctx)
	err := r.proposeUntilAccepted(ctx, func(ctx context.Context) error {
		if delay > 0 {
			d := delay
			delay = 0 // proposed again (dropped in a transfer): at once
			return r.node.ProposeDeferred(ctx, data, d, placement(turn))
		}
		return r.node.ProposePlaced(ctx, data, placement(turn))
	})
	turn.End() // the entry is with raft (or never will be): the next may go, if Placed did not let it
	if err != nil {
		m.ProposalFailed()
		if ctx.Err() != nil {
			// raft may have taken it just as the deadline passed.
			return fsm.Result{}, 0, r.Unavailable("no leader took the proposal within the deadline; outcome unknown")
		}
		return fsm.Result{}, 0, r.Unavailable("proposal not accepted (not applied): %v", err)
	}
	timer := waitTimer(dl.remaining())
	defer releaseTimer(timer)
	select {
	case o := <-ch:
		timeline.Mark(timeline.Answered)
		r.waiters.recycle(ch)
		if o.err != nil {
			m.ProposalFailed()
		}
		return o.result, o.index, o.err
	case <-r.node.Done():
		return fsm.Result{}, 0, r.Unavailable("server is stopping")
	case <-dl.parent.Done():
	case <-timer.C:
	}
	m.ProposalFailed()
	return fsm.Result{}, 0, r.Unavailable("not committed within the request deadline; outcome unknown")
}

// PlaceDeferral is the deferral (Deferred) of a new place at the back of a
// lock's or election's queue, behind another session's: such a place is
// granted only after a release, a write of its own, so the wait costs its
// holder nothing unless the release comes sooner, and under contention the
// place shares the release's WAL save instead of taking one.
const PlaceDeferral = 2 * time.Millisecond

// deferralKey is the context key of a write's deferral (Deferred).
type deferralKey struct{}

// Deferred returns ctx under which Propose lets its entry wait up to delay
// at the leader for another write proposed or forwarded there to leave with
// (raftnode.Node.ProposeDeferred): for a write whose outcome its caller does
// not need at once, such as a place at the back of a lock's queue behind
// others, which then shares a WAL save with the next write.
func Deferred(ctx context.Context, delay time.Duration) context.Context {
	return context.WithValue(ctx, deferralKey{}, delay)
}

// DeferralOf returns the deferral Deferred put in ctx, 0 if none.
func DeferralOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(deferralKey{}).(time.Duration)
	return d
}

// proposeUntilAccepted hands a proposal to raft with propose, proposing
// again while the leader here drops it (it does during a leadership
// transfer): a dropped proposal was never appended, so proposing it again
// cannot apply it twice.
func (r *Replica) proposeUntilAccepted(ctx context.Context, propose func(ctx context.Context) error) error {
	pause := time.Millisecond
	for {
		err := propose(ctx)
		if !errors.Is(err, raft.ErrProposalDropped) {
			return err
		}
		timer := r.cfg.Clock.NewTimer(pause)
		select {
		case <-timer.C():
			pause = min(2*pause, r.cfg.ElectionTimeout/10)
		case <-ctx.Done():
			timer.Stop()
			return err
		}
	}
}

// ProposeConfChange proposes a one-change conf change carrying member's
// addresses and waits until this server applied it.
func (r *Replica) ProposeConfChange(ctx context.Context, change raftpb.ConfChangeSingle, member command.Member) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	id, ch := r.waiters.add()
	defer r.waiters.remove(id)
	cc := raftpb.ConfChangeV2{
		Changes: []raftpb.ConfChangeSingle{change},
		Context: encodeConfContext(confContext{Member: member, Proposal: id}),
	}
	err := r.proposeUntilAccepted(ctx, func(ctx context.Context) error { return r.node.ProposeConfChange(ctx, cc) })
	if err != nil {
		return 0, r.Unavailable("membership change not accepted: %v", err)
	}
	select {
	case o := <-ch:
		return o.index, o.err
	case <-ctx.Done():
		return 0, r.Unavailable("membership change not applied within the deadline (another change may be pending); outcome unknown")
	}
}

// wallMs is t in milliseconds since the Unix epoch, at least 1: a clock
// set before 1970 records the epoch rather than a wrapped time, and the
// command is still stamped (TimeMs 0 means an older binary's entry).
func wallMs(t time.Time) uint64 {
	return uint64(max(t.UnixMilli(), 1))
}
