package server

import (
	"context"
	"crypto/rand"
	"errors"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
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
}

func newWaiterTable() *waiterTable {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &waiterTable{ids: mathrand.NewChaCha8(seed), waiting: make(map[uint64]chan outcome)}
}

// add registers a new proposal id and returns it with its channel.
func (t *waiterTable) add() (uint64, chan outcome) {
	ch := make(chan outcome, 1)
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

// propose replicates cmd and waits until this server applied it. The result
// may carry a deterministic refusal in Result.Err; the error is for failures
// (overload, no quorum in time, leader change) whose outcome is unknown.
func (g *group) propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	s := g.server
	if g.waiters.len() >= s.cfg.MaxPending {
		s.metrics.proposalFailed()
		return fsm.Result{}, 0, api.Errorf(api.CodeOverloaded, "%d proposals pending; retry with backoff", s.cfg.MaxPending)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	id, ch := g.waiters.add()
	defer g.waiters.remove(id)
	cmd.ID = id
	s.metrics.proposalStarted()
	defer s.metrics.proposalEnded()
	if err := g.proposeUntilAccepted(ctx, cmd.Marshal()); err != nil {
		s.metrics.proposalFailed()
		if ctx.Err() != nil {
			// raft may have taken it just as the deadline passed.
			return fsm.Result{}, 0, g.unavailable("no leader took the proposal within the deadline; outcome unknown")
		}
		return fsm.Result{}, 0, g.unavailable("proposal not accepted (not applied): %v", err)
	}
	select {
	case o := <-ch:
		if o.err != nil {
			s.metrics.proposalFailed()
		}
		return o.result, o.index, o.err
	case <-ctx.Done():
		s.metrics.proposalFailed()
		return fsm.Result{}, 0, g.unavailable("not committed within the request deadline; outcome unknown")
	case <-g.node.Done():
		return fsm.Result{}, 0, g.unavailable("server is stopping")
	}
}

// proposeUntilAccepted hands data to raft, proposing again while the leader
// here drops it (it does during a leadership transfer): a dropped proposal
// was never appended, so proposing it again cannot apply it twice.
func (g *group) proposeUntilAccepted(ctx context.Context, data []byte) error {
	pause := time.Millisecond
	for {
		err := g.node.Propose(ctx, data)
		if !errors.Is(err, raft.ErrProposalDropped) {
			return err
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, g.server.electionTimeout()/10)
		case <-ctx.Done():
			return err
		}
	}
}
