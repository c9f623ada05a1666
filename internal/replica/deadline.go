package replica

import (
	"context"
	"sync"
	"time"
)

// deadline is a proposal's request timeout as a context, made cheap for
// the common case. A proposal's waits take a pooled timer and the parent's
// Done (waitTimer): for its turn's predecessor to propose (Turn.wait) and
// for the apply. Only the rare waits inside raftnode's Propose (no leader)
// and proposeUntilAccepted (a proposal dropped in a leader change) ask the
// deadline itself for Done. So the context that context.WithDeadline would
// make (a cancelable context, its channel, a timer, and a place in the
// parent's list of children) is made only on those paths, and a proposal
// that takes none of them makes one allocation, this struct.
//
// A deadline is safe for use by several goroutines, as a context must be;
// stop releases what it made. It stays inside Propose: Value hands every
// key to the parent, the context package's own included, so a context
// derived from a deadline would see the parent's cancellation, not the
// deadline's.
type deadline struct {
	parent context.Context
	at     time.Time

	mu     sync.Mutex
	ctx    context.Context // made by the first Done, guarded by mu; then Err defers to it
	cancel context.CancelFunc
}

// newDeadline returns a context done when parent is, or at timeout from now.
func newDeadline(parent context.Context, timeout time.Duration) *deadline {
	return &deadline{parent: parent, at: time.Now().Add(timeout)}
}

func (d *deadline) Deadline() (time.Time, bool) {
	if at, ok := d.parent.Deadline(); ok && at.Before(d.at) {
		return at, true
	}
	return d.at, true
}

// Done makes the context on first use.
func (d *deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithDeadline(d.parent, d.at)
	}
	return d.ctx.Done()
}

func (d *deadline) Err() error {
	if ctx := d.made(); ctx != nil {
		return ctx.Err()
	}
	if err := d.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(d.at) {
		return context.DeadlineExceeded
	}
	return nil
}

func (d *deadline) Value(key any) any { return d.parent.Value(key) }

// made returns the context Done made, or nil.
func (d *deadline) made() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

// stop releases the context Done made, if it made one.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
	}
}

// remaining is the time left before the deadline (never negative).
func (d *deadline) remaining() time.Duration {
	return max(time.Until(d.at), 0)
}

// timers keeps stopped timers for waitTimer: a proposal's wait for its
// apply would otherwise make one each.
var timers sync.Pool

// waitTimer returns a timer that fires after dur; give it back with
// releaseTimer once the wait is over, fired or not.
func waitTimer(dur time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(dur)
		return t
	}
	return time.NewTimer(dur)
}

// releaseTimer stops t and keeps it for another wait. Since Go 1.23 a
// stopped timer's channel holds no stale fire, but GODEBUG=asynctimerchan=1
// brings the old timers back, whose fire can wait in the channel after
// Stop: so a fire not received is drained here, and a kept timer is as
// good as a new one under either.
func releaseTimer(t *time.Timer) {
	stopTimer(t)
	timers.Put(t)
}

// stopTimer stops t and drains a fire that waits in its channel unreceived.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}
