package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
)

// readRound is one ReadIndex round shared by every read that joined it.
type readRound struct {
	done  chan struct{} // closed when index and err are set
	index uint64
	err   error
}

// readBatcher batches linearizable reads: one ReadIndex round in flight, the
// reads arriving meanwhile join the next round.
type readBatcher struct {
	r      *Replica
	states chan raft.ReadState // answers from the Ready loop
	wake   chan struct{}       // a read is waiting (capacity 1)

	// boot makes request contexts unique across servers and restarts: the
	// leader ignores a ReadIndex whose context it already has pending.
	boot [8]byte

	mu      sync.Mutex
	pending *readRound // guarded by mu: the round new reads join
	seq     uint64     // guarded by mu: request context counter
}

func newReadBatcher(r *Replica) *readBatcher {
	b := &readBatcher{
		r:       r,
		states:  make(chan raft.ReadState, 256),
		wake:    make(chan struct{}, 1),
		pending: &readRound{done: make(chan struct{})},
	}
	_, _ = rand.Read(b.boot[:])
	return b
}

// ReadIndex returns an index that a linearizable read must see applied:
// every write acknowledged before it was called has an index at most this.
// It shares one ReadIndex round with the reads that call it meanwhile.
func (r *Replica) ReadIndex(ctx context.Context) (uint64, error) { return r.reads.wait(ctx) }

func (b *readBatcher) wait(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	round := b.pending
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-round.done:
		return round.index, round.err
	case <-ctx.Done():
		return 0, b.r.Unavailable("linearizable read not confirmed by a quorum in time")
	case <-b.r.cfg.Stop:
		return 0, ErrStopping
	}
}

// loop runs rounds until stop closes.
func (b *readBatcher) loop(stop <-chan struct{}) {
	for {
		select {
		case <-b.wake:
		case <-stop:
			b.finish(b.takePending(), 0, ErrStopping)
			return
		}
		round := b.takePending()
		index, err := b.readIndex(stop)
		b.finish(round, index, err)
	}
}

func (b *readBatcher) takePending() *readRound {
	b.mu.Lock()
	defer b.mu.Unlock()
	round := b.pending
	b.pending = &readRound{done: make(chan struct{})}
	b.seq++
	return round
}

func (b *readBatcher) finish(round *readRound, index uint64, err error) {
	round.index, round.err = index, err
	close(round.done)
}

// readIndex runs one ReadIndex request, resending it while no answer comes
// (a leader change drops it), until the request deadline.
func (b *readBatcher) readIndex(stop <-chan struct{}) (uint64, error) {
	b.mu.Lock()
	rctx := binary.BigEndian.AppendUint64(b.boot[:len(b.boot):len(b.boot)], b.seq)
	b.mu.Unlock()
	cfg := b.r.cfg
	deadline := cfg.Clock.NewTimer(cfg.RequestTimeout)
	defer deadline.Stop()
	resend := cfg.Clock.NewTicker(cfg.ElectionTimeout / 2)
	defer resend.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
		err := b.r.node.ReadIndex(ctx, rctx)
		cancel()
		if err != nil {
			return 0, b.r.Unavailable("read index: %v", err)
		}
	wait:
		for {
			select {
			case st := <-b.states:
				if bytes.Equal(st.RequestCtx, rctx) {
					return st.Index, nil
				}
			case <-resend.C():
				break wait
			case <-deadline.C():
				return 0, b.r.Unavailable("no quorum confirmed the read index in time")
			case <-stop:
				return 0, ErrStopping
			}
		}
	}
}

// WaitApplied waits until the state machine has applied index.
func (r *Replica) WaitApplied(ctx context.Context, index uint64) error {
	for r.applied.Load() < index {
		ch := r.appliedChanged()
		if r.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-r.node.Done():
			return r.Halted()
		case <-ctx.Done():
			return r.Unavailable("index %d not applied here within the deadline (applied %d)", index, r.applied.Load())
		}
	}
	return nil
}

// Barrier makes a read at the given consistency safe to serve locally.
func (r *Replica) Barrier(ctx context.Context, consistency string, minIndex uint64) error {
	if err := r.Halted(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	linearizable := consistency == api.Linearizable && !r.cfg.UnsafeLocalReads
	if linearizable || r.beyondLocalCommit(minIndex) {
		// The read index is the leader's commit index, confirmed by a
		// quorum: every index any member acknowledged is at most it.
		index, err := r.reads.wait(ctx)
		if err != nil {
			return err
		}
		if minIndex > index {
			return api.Errorf(api.CodeInvalidArgument,
				"min_index %d is beyond the cluster's commit index %d: no write has that index yet", minIndex, index)
		}
		if linearizable {
			minIndex = max(minIndex, index)
		}
	}
	return r.WaitApplied(ctx, minIndex)
}

// beyondLocalCommit reports whether minIndex is neither applied nor known
// committed here. Only then can it be beyond what the cluster committed; a
// follower's commit index may lag the leader's, so this alone refuses
// nothing.
func (r *Replica) beyondLocalCommit(minIndex uint64) bool {
	return minIndex > r.applied.Load() && minIndex > r.node.Status().Commit
}

// Halted returns a 503 once the group's raft node has stopped (the server
// is stopping, or stopped applying on a fatal error): its state is no
// longer kept up to date and must not be served, not even as a stale read.
func (r *Replica) Halted() error {
	select {
	case <-r.node.Done():
	default:
		return nil
	}
	if err := r.node.Err(); err != nil {
		return api.Errorf(api.CodeUnavailable, "this member stopped on a fatal error and serves nothing: %v", err)
	}
	return ErrStopping
}
