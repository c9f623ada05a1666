package clock

import "time"

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current reading for measuring elapsed time (the
	// package comment's invariants 1 and 3).
	Now() time.Time
	// Since returns the time elapsed since t, a reading of this clock.
	Since(t time.Time) time.Duration
	// Until returns the time left until t, a reading of this clock.
	Until(t time.Time) time.Duration
	// Wall returns the civil time, which jumps move (invariant 2).
	Wall() time.Time
	// NewTimer returns a timer that sends this clock's reading on its
	// channel once d has elapsed.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that sends this clock's reading every d; it
	// panics if d <= 0, as time.NewTicker does.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine (for Fake: from Advance) once d
	// has elapsed. The returned Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
	// After is NewTimer(d).C(); the timer cannot be stopped, so prefer
	// NewTimer where the caller may return first.
	After(d time.Duration) <-chan time.Time
}

// Timer is a single event, as time.Timer.
type Timer interface {
	// C is the channel the reading is sent on (nil for AfterFunc timers).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset rearms the timer to fire after d; it reports whether the timer
	// was active. As with time.Timer (Go 1.23 and later), no stale value is
	// received after Stop or Reset returns.
	Reset(d time.Duration) bool
}

// Ticker delivers readings at intervals, as time.Ticker.
type Ticker interface {
	// C is the channel readings are sent on (buffer of one).
	C() <-chan time.Time
	// Stop turns the ticker off.
	Stop()
	// Reset stops the ticker and restarts it with period d.
	Reset(d time.Duration)
}
