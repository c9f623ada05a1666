package raftnode

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/timeline"
)

// appender is the node's append thread (raft's LocalAppendThread): it makes
// the MsgStorageAppend messages of the Ready loop durable, in the order they
// were queued, and only then delivers the responses they carry. Messages
// queued while a save runs are saved together by the next one (one WAL
// write, one fsync), so the Ready loop goes on replicating and applying
// while a batch is being synced.
//
// Invariant: a response of a queued message (a follower's MsgAppResp or
// MsgVoteResp, the leader's own acknowledgement of its entries) is
// delivered only after the message and every message queued before it are
// durable.
type appender struct {
	n *Node

	mu sync.Mutex
	// queue holds the work not yet taken by the append goroutine, in order.
	queue []appendWork  // guarded by mu
	wake  chan struct{} // one slot: work was queued
	done  chan struct{} // closed when the append goroutine returns
	// err is why the append goroutine returned (errStopping on Stop); read
	// after done is closed.
	err error

	// busySince is the Clock reading, in nanoseconds after Node.started, at
	// which the save under way began; 0 while no save runs.
	busySince atomic.Int64
}

// appendWork is one queued MsgStorageAppend, or a barrier: flushed is
// closed once every message queued before it is durable and answered.
type appendWork struct {
	message raftpb.Message
	flushed chan struct{}
}

// maxAppendsPerSave bounds how many queued messages one WAL save takes.
const maxAppendsPerSave = 256

func newAppender(n *Node) *appender {
	return &appender{n: n, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// enqueue queues m for the append goroutine; it never blocks. Called from
// the Ready loop.
func (a *appender) enqueue(work appendWork) {
	timeline.Mark(timeline.AppendQueued)
	a.mu.Lock()
	a.queue = append(a.queue, work)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// flush waits until every message queued so far is durable and its
// responses delivered. It returns the append goroutine's error if that
// stopped first.
func (a *appender) flush() error {
	flushed := make(chan struct{})
	a.enqueue(appendWork{flushed: flushed})
	select {
	case <-flushed:
		return nil
	case <-a.done:
		return a.err
	}
}

// run is the append goroutine. It returns on Stop (errStopping) or on the
// first storage error, which is fatal.
func (a *appender) run() {
	defer close(a.done)
	for {
		work, ok := a.next()
		if !ok {
			a.err = errStopping
			return
		}
		if err := a.save(work); err != nil {
			a.err = err
			return
		}
		a.letReadyLoopQueue()
	}
}

// letReadyLoopQueue yields once, after a save, if work waits in the queue
// and raft holds a Ready: the Ready loop held that Ready back while the
// work waited for the save (handleNextReady), was woken by the save's end,
// and may now queue it behind the work, to leave in the same save rather
// than wait for a save of its own.
func (a *appender) letReadyLoopQueue() {
	if a.backlogged() && a.n.hasReady() {
		runtime.Gosched()
	}
}

// next waits for queued work and takes up to maxAppendsPerSave messages
// (and the barriers among them); false once the node stops.
func (a *appender) next() ([]appendWork, bool) {
	for {
		a.mu.Lock()
		if len(a.queue) > 0 {
			take := min(len(a.queue), maxAppendsPerSave)
			work := a.queue[:take:take]
			a.queue = a.queue[take:]
			a.mu.Unlock()
			a.n.storageProgressed() // the Ready loop may take the next Ready
			return work, true
		}
		a.mu.Unlock()
		select {
		case <-a.wake:
		case <-a.n.appendStop:
			return nil, false
		}
	}
}

// save makes the messages of work durable with one WAL save, delivers their
// responses, then releases the barriers.
func (a *appender) save(work []appendWork) error {
	msgs := make([]raftpb.Message, 0, len(work))
	for _, w := range work {
		if w.flushed == nil {
			msgs = append(msgs, w.message)
		}
	}
	a.busySince.Store(max(1, int64(a.n.cfg.Clock.Since(a.n.started))))
	timeline.Mark(timeline.SaveStart)
	err := a.n.storeAppends(msgs, nil)
	timeline.Mark(timeline.SaveEnd)
	a.busySince.Store(0)
	a.n.storageProgressed()
	if err != nil {
		return err
	}
	for _, w := range work {
		if w.flushed != nil {
			close(w.flushed)
		}
	}
	clear(work) // the queue's array keeps these slots until it grows: drop the entries
	return nil
}

// waitsForSave reports whether queued messages wait for a save under way
// (the Ready loop then holds back its next Ready).
func (a *appender) waitsForSave() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue) > 0 && a.busySince.Load() != 0
}

// backlogged reports whether messages are queued that the append goroutine
// has not taken yet.
func (a *appender) backlogged() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue) > 0
}

// busyFor is how long the save under way has taken (0 when none runs).
func (a *appender) busyFor() time.Duration {
	since := a.busySince.Load()
	if since == 0 {
		return 0
	}
	return a.n.cfg.Clock.Since(a.n.started) - time.Duration(since)
}

// storeAppends makes msgs (MsgStorageAppend, in raft's order) durable with
// one WAL save, updates the in-memory raft log, and then delivers every
// response they carry. Called by the append goroutine, or by the Ready loop
// (snapDone non-nil) for a message carrying a snapshot, once the append
// goroutine is flushed: installing a snapshot touches the state machine,
// which only the Ready loop may.
func (n *Node) storeAppends(msgs []raftpb.Message, snapDone <-chan snapshotResult) error {
	if batches := n.walBatches(msgs); len(batches) > 0 {
		if err := n.saveWhenSpace(batches, snapDone); err != nil {
			return err
		}
	}
	for i := range msgs {
		if err := n.storeInRaftLog(&msgs[i]); err != nil {
			return err
		}
	}
	for i := range msgs {
		if err := n.deliver(msgs[i].Responses); err != nil {
			return err
		}
	}
	return nil
}

// storeInRaftLog installs m's snapshot (Ready loop only), then records its
// hard state and entries in the in-memory raft log. m is durable.
func (n *Node) storeInRaftLog(m *raftpb.Message) error {
	if m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot) {
		if err := n.installSnapshot(*m.Snapshot); err != nil {
			return err
		}
	}
	if err := n.setHardState(hardStateOf(m)); err != nil {
		return err
	}
	if err := n.storage.Append(m.Entries); err != nil {
		return fmt.Errorf("raftnode: group %d: append to raft log: %w", n.cfg.Group, err)
	}
	return nil
}

// hardStateOf is the hard state a MsgStorageAppend carries (empty: none).
func hardStateOf(m *raftpb.Message) raftpb.HardState {
	return raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
}

// deliver hands responses, in order, to their targets once what they
// depend on is durable: the node's own (MsgStorageAppendResp, a leader's
// MsgAppResp to itself, MsgStorageApplyResp) to raft, under the lock, the
// others to the transport, less the acknowledgements that tell the leader
// nothing new (acks.go). raft's refusal of a response (one from a member
// since removed) drops it, as raft.Node did.
func (n *Node) deliver(responses []raftpb.Message) error {
	for i := range responses {
		if responses[i].To != n.cfg.ID {
			n.send(n.acks.filter(responses[i : i+1]))
			continue
		}
		if _, err := n.stepLocked(func() (bool, error) { return false, n.raft.Step(responses[i]) }); errors.Is(err, ErrStopped) {
			return errStopping
		}
	}
	n.notify()
	return nil
}
