package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

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
	g      *group
	states chan raft.ReadState // answers from the Ready loop
	wake   chan struct{}       // a read is waiting (capacity 1)

	// boot makes request contexts unique across servers and restarts: the
	// leader ignores a ReadIndex whose context it already has pending.
	boot [8]byte

	mu      sync.Mutex
	pending *readRound // guarded by mu: the round new reads join
	seq     uint64     // guarded by mu: request context counter
}

func newReadBatcher(g *group) *readBatcher {
	r := &readBatcher{
		g:       g,
		states:  make(chan raft.ReadState, 256),
		wake:    make(chan struct{}, 1),
		pending: &readRound{done: make(chan struct{})},
	}
	_, _ = rand.Read(r.boot[:])
	return r
}

// wait returns an index that a linearizable read must see applied: every
// write acknowledged before wait was called has an index at most this.
func (r *readBatcher) wait(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	round := r.pending
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case <-round.done:
		return round.index, round.err
	case <-ctx.Done():
		return 0, r.g.unavailable("linearizable read not confirmed by a quorum in time")
	case <-r.g.server.stop:
		return 0, errStopping
	}
}

// loop runs rounds until stop closes.
func (r *readBatcher) loop(stop <-chan struct{}) {
	for {
		select {
		case <-r.wake:
		case <-stop:
			r.finish(r.takePending(), 0, api.Errorf(api.CodeUnavailable, "server is stopping"))
			return
		}
		round := r.takePending()
		index, err := r.readIndex(stop)
		r.finish(round, index, err)
	}
}

func (r *readBatcher) takePending() *readRound {
	r.mu.Lock()
	defer r.mu.Unlock()
	round := r.pending
	r.pending = &readRound{done: make(chan struct{})}
	r.seq++
	return round
}

func (r *readBatcher) finish(round *readRound, index uint64, err error) {
	round.index, round.err = index, err
	close(round.done)
}

// readIndex runs one ReadIndex request, resending it while no answer comes
// (a leader change drops it), until the request deadline.
func (r *readBatcher) readIndex(stop <-chan struct{}) (uint64, error) {
	r.mu.Lock()
	rctx := binary.BigEndian.AppendUint64(r.boot[:len(r.boot):len(r.boot)], r.seq)
	r.mu.Unlock()
	deadline := time.NewTimer(r.g.server.cfg.RequestTimeout)
	defer deadline.Stop()
	resend := time.NewTicker(r.g.server.electionTimeout() / 2)
	defer resend.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), r.g.server.cfg.RequestTimeout)
		err := r.g.node.ReadIndex(ctx, rctx)
		cancel()
		if err != nil {
			return 0, r.g.unavailable("read index: %v", err)
		}
	wait:
		for {
			select {
			case st := <-r.states:
				if bytes.Equal(st.RequestCtx, rctx) {
					return st.Index, nil
				}
			case <-resend.C:
				break wait
			case <-deadline.C:
				return 0, r.g.unavailable("no quorum confirmed the read index in time")
			case <-stop:
				return 0, api.Errorf(api.CodeUnavailable, "server is stopping")
			}
		}
	}
}

// waitApplied waits until the state machine has applied index.
func (g *group) waitApplied(ctx context.Context, index uint64) error {
	for g.applied.Load() < index {
		ch := g.appliedChanged()
		if g.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-g.node.Done():
			return g.halted()
		case <-ctx.Done():
			return g.unavailable("index %d not applied here within the deadline (applied %d)", index, g.applied.Load())
		}
	}
	return nil
}

// barrier makes a read at the given consistency safe to serve locally.
func (g *group) barrier(ctx context.Context, consistency string, minIndex uint64) error {
	if err := g.halted(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, g.server.cfg.RequestTimeout)
	defer cancel()
	linearizable := consistency == api.Linearizable && !g.server.cfg.UnsafeLocalReads
	if linearizable || g.beyondLocalCommit(minIndex) {
		// The read index is the leader's commit index, confirmed by a
		// quorum: every index any member acknowledged is at most it.
		index, err := g.reads.wait(ctx)
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
	return g.waitApplied(ctx, minIndex)
}

// beyondLocalCommit reports whether minIndex is neither applied nor known
// committed here. Only then can it be beyond what the cluster committed; a
// follower's commit index may lag the leader's, so this alone refuses
// nothing.
func (g *group) beyondLocalCommit(minIndex uint64) bool {
	return minIndex > g.applied.Load() && minIndex > g.node.Status().Commit
}

// halted returns a 503 once the group's raft node has stopped (the server
// is stopping, or stopped applying on a fatal error): its state is no
// longer kept up to date and must not be served, not even as a stale read.
func (g *group) halted() error {
	select {
	case <-g.node.Done():
	default:
		return nil
	}
	if err := g.node.Err(); err != nil {
		return api.Errorf(api.CodeUnavailable, "this member stopped on a fatal error and serves nothing: %v", err)
	}
	return errStopping
}
