package sockio

import (
	"sync"
	"time"
)

// deadline is a read deadline: a channel closed once the time set has
// passed, and replaced by an open one when a later time (or none) is set.
// One timer serves every time set, so the several deadlines net/http sets
// a request allocate nothing.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	at     time.Time     // the deadline set; the zero time: none
	closed bool          // expiry is closed
	expiry chan struct{} // closed once the deadline passed
}

func (d *deadline) init() {
	d.expiry = make(chan struct{})
}

// set makes t the deadline (the zero time: none).
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
	if d.timer != nil {
		d.timer.Stop()
	}
	if t.IsZero() {
		d.reopen()
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expire()
		return
	}
	d.reopen()
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
		return
	}
	d.timer.Reset(wait)
}

// fire closes the channel if the deadline set has passed: the timer may
// fire for a time set before, already replaced.
func (d *deadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.at.IsZero() && !time.Now().Before(d.at) {
		d.expire()
	}
}

// expire closes the channel; d.mu must be held.
func (d *deadline) expire() {
	if !d.closed {
		close(d.expiry)
		d.closed = true
	}
}

// reopen replaces a closed channel by an open one; d.mu must be held.
func (d *deadline) reopen() {
	if d.closed {
		d.expiry = make(chan struct{})
		d.closed = false
	}
}

// passed returns the channel closed once the deadline passes.
func (d *deadline) passed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.expiry
}
