package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Fake is a Clock for tests whose time moves only when the test calls
// Advance. Its readings carry no monotonic part: Now is start plus the total
// advanced, so tests can compare readings exactly.
//
// Timers and tickers fire inside Advance, one at a time in deadline order
// (creation order on ties), with Now set to the deadline of the one firing.
// A channel send never blocks (timers and tickers have a buffer of one; a
// tick the receiver has not taken is dropped, as with time.Ticker), and an
// AfterFunc's f runs on the goroutine calling Advance, before the next timer
// fires: so a test that advances time sees every effect of the due timers
// that does not wait for another goroutine. An AfterFunc's f must not call
// Advance.
type Fake struct {
	advancing sync.Mutex // serializes Advance calls

	mu      sync.Mutex
	now     time.Time     // guarded by mu; never decreases
	wall    time.Duration // guarded by mu: Wall minus Now, moved by Jump
	seq     uint64        // guarded by mu: creation order of arms, for ties
	pending []*fakeTimer  // guarded by mu: armed timers and tickers
	waiters []waiter      // guarded by mu: BlockUntil calls not yet satisfied
}

type waiter struct {
	n    int
	done chan struct{}
}

// NewFake returns a fake clock reading start (its monotonic part stripped).
func NewFake(start time.Time) *Fake {
	return &Fake{now: start.Round(0)}
}

// Now returns the fake's current reading.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Until returns t.Sub(Now()).
func (f *Fake) Until(t time.Time) time.Duration { return t.Sub(f.Now()) }

// Wall returns Now moved by every Jump so far.
func (f *Fake) Wall() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now.Add(f.wall)
}

// Jump moves the wall reading by d (either way); Now, elapsed time and
// timers are untouched.
func (f *Fake) Jump(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall += d
}

// Advance moves time forward by d, firing every timer and ticker due by then
// in deadline order. It panics if d is negative: the clock is monotonic.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("clock: Advance(%v): a clock cannot go back", d))
	}
	f.advancing.Lock()
	defer f.advancing.Unlock()
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	for f.fireNext(target) {
	}
	f.mu.Lock()
	f.now = target
	f.mu.Unlock()
}

// fireNext fires the earliest timer due by target, if any, and reports
// whether it fired one.
func (f *Fake) fireNext(target time.Time) bool {
	f.mu.Lock()
	t := f.nextDueLocked(target)
	if t == nil {
		f.mu.Unlock()
		return false
	}
	if t.deadline.After(f.now) {
		f.now = t.deadline
	}
	fn := t.fireLocked()
	f.mu.Unlock()
	if fn != nil {
		fn()
	}
	return true
}

// nextDueLocked returns the armed timer with the earliest deadline not after
// target (the first armed on ties), or nil. f.mu must be held.
func (f *Fake) nextDueLocked(target time.Time) *fakeTimer {
	var next *fakeTimer
	for _, t := range f.pending {
		if t.deadline.After(target) {
			continue
		}
		if next == nil || t.deadline.Before(next.deadline) || t.deadline.Equal(next.deadline) && t.seq < next.seq {
			next = t
		}
	}
	return next
}

// Pending returns how many timers and tickers are armed.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// BlockUntil waits until at least n timers and tickers are armed, so that a
// test advances time only once the code under test is waiting on it. It
// returns ctx's error, wrapped, if ctx ends first.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	f.mu.Lock()
	if len(f.pending) >= n {
		f.mu.Unlock()
		return nil
	}
	w := waiter{n: n, done: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		f.dropWaiterLocked(w)
		return fmt.Errorf("clock: waiting for %d armed timers, %d armed: %w", n, len(f.pending), ctx.Err())
	}
}

func (f *Fake) dropWaiterLocked(w waiter) {
	for i, other := range f.waiters {
		if other.done == w.done {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return
		}
	}
}

// NewTimer returns a timer firing once d has been advanced. A timer for
// d <= 0 has the reading in its channel on return.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc returns a timer calling f from Advance once d has been advanced;
// for d <= 0, from the next Advance (Advance(0) will do).
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{clock: f, fn: fn}
	t.Reset(d)
	return t
}

// After returns NewTimer(d).C().
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTicker returns a ticker firing every d of advanced time. It panics if
// d <= 0.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	k := fakeTicker{&fakeTimer{clock: f, c: make(chan time.Time, 1)}}
	k.Reset(d)
	return k
}

// fakeTimer is a Fake's timer, AfterFunc or (period > 0) ticker.
type fakeTimer struct {
	clock *Fake
	c     chan time.Time // nil for AfterFunc
	fn    func()         // nil unless AfterFunc

	// Guarded by clock.mu:
	period   time.Duration // > 0 for a ticker
	deadline time.Time
	seq      uint64
	armed    bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.stopLocked()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	wasArmed := t.stopLocked()
	if d <= 0 && t.c != nil && t.period == 0 {
		t.c <- f.now // drained by stopLocked: room for one
		return wasArmed
	}
	t.deadline = f.now.Add(max(d, 0))
	t.armLocked()
	return wasArmed
}

// stopLocked disarms t and empties its channel, so that nothing stale is
// received after Stop or Reset. clock.mu must be held.
func (t *fakeTimer) stopLocked() bool {
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	return t.disarmLocked()
}

// disarmLocked removes t from the pending timers and reports whether it was
// there. clock.mu must be held.
func (t *fakeTimer) disarmLocked() bool {
	if !t.armed {
		return false
	}
	f := t.clock
	for i, other := range f.pending {
		if other == t {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			break
		}
	}
	t.armed = false
	return true
}

// armLocked adds t to the pending timers and wakes BlockUntil calls it
// satisfies. clock.mu must be held.
func (t *fakeTimer) armLocked() {
	f := t.clock
	f.seq++
	t.seq = f.seq
	t.armed = true
	f.pending = append(f.pending, t)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if len(f.pending) >= w.n {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// fireLocked delivers t's event at the clock's current reading and rearms a
// ticker; it returns the AfterFunc to call once clock.mu is released.
func (t *fakeTimer) fireLocked() func() {
	now := t.clock.now
	if t.period > 0 {
		t.deadline = t.deadline.Add(t.period)
		t.clock.seq++
		t.seq = t.clock.seq
	} else {
		t.disarmLocked()
	}
	if t.fn != nil {
		return t.fn
	}
	select {
	case t.c <- now:
	default: // the receiver has not taken the last one: drop, as time.Ticker
	}
	return nil
}

// fakeTicker is a fakeTimer with a period.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }

func (k fakeTicker) Stop() { k.t.Stop() }

func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("clock: non-positive ticker period %v", d))
	}
	f := k.t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	k.t.stopLocked()
	k.t.period = d
	k.t.deadline = f.now.Add(d)
	k.t.armLocked()
}
