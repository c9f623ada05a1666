package clock

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Skewed is a Clock running at a settable rate relative to another clock,
// its base, and taking wall-clock jumps: the faults a node's clock shows in
// fault tests. Over Real it skews a live node; over a Fake it is
// deterministic.
//
// Now is the base's first reading plus the skewed elapsed time, so over Real
// its readings carry a monotonic part. Each pending timer or ticker holds one
// AfterFunc of the base: over a Fake, the base's BlockUntil counts them. A rate change takes effect from the
// moment of the call and rearms every pending timer and ticker, so each
// fires when the skewed clock reaches its deadline (a ticker's deadlines
// stay one period apart).
type Skewed struct {
	base  Clock
	start time.Time // base.Now() at creation

	mu         sync.Mutex
	anchorBase time.Time               // guarded by mu: base reading at the last rate change
	anchorAt   time.Duration           // guarded by mu: skewed elapsed time at anchorBase
	rate       float64                 // guarded by mu: skewed seconds per base second
	wall       time.Duration           // guarded by mu: moved by Jump
	seq        uint64                  // guarded by mu: creation order of arms
	timers     map[*skewTimer]struct{} // guarded by mu: armed timers and tickers
}

// NewSkewed returns a clock that reads as base does, at rate 1, until
// SetRate or Jump.
func NewSkewed(base Clock) *Skewed {
	now := base.Now()
	return &Skewed{base: base, start: now, anchorBase: now, rate: 1, timers: map[*skewTimer]struct{}{}}
}

// SetRate makes the clock run at rate times its base from now on: 2 runs
// twice as fast, 0.5 half as fast. The rate must be positive and finite.
func (s *Skewed) SetRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("clock: rate %v: must be positive and finite", rate)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.base.Now()
	s.anchorAt = s.elapsedLocked(now)
	s.anchorBase = now
	s.rate = rate
	s.rearmLocked()
	return nil
}

// rearmLocked rearms every pending timer at the current rate, in the order
// they were armed, so that over a Fake timers due at the same moment keep
// firing in creation order. s.mu must be held.
func (s *Skewed) rearmLocked() {
	timers := make([]*skewTimer, 0, len(s.timers))
	for t := range s.timers {
		timers = append(timers, t)
	}
	slices.SortFunc(timers, func(a, b *skewTimer) int { return cmp.Compare(a.seq, b.seq) })
	for _, t := range timers {
		t.armLocked()
	}
}

// Rate returns the current rate.
func (s *Skewed) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rate
}

// Jump moves the wall reading by d (either way); Now, elapsed time and
// timers are untouched.
func (s *Skewed) Jump(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wall += d
}

// elapsedLocked is the skewed time elapsed since creation when the base
// reads baseNow. s.mu must be held.
func (s *Skewed) elapsedLocked(baseNow time.Time) time.Duration {
	return s.anchorAt + time.Duration(float64(baseNow.Sub(s.anchorBase))*s.rate)
}

// Now returns the skewed reading.
func (s *Skewed) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start.Add(s.elapsedLocked(s.base.Now()))
}

// Since returns Now().Sub(t).
func (s *Skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// Until returns t.Sub(Now()).
func (s *Skewed) Until(t time.Time) time.Duration { return t.Sub(s.Now()) }

// Wall returns the base's wall reading plus the drift the rate has
// accumulated and every Jump so far.
func (s *Skewed) Wall() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	baseNow := s.base.Now()
	drift := s.elapsedLocked(baseNow) - baseNow.Sub(s.start)
	return s.base.Wall().Add(drift + s.wall)
}

// NewTimer returns a timer firing when the skewed clock has advanced d.
func (s *Skewed) NewTimer(d time.Duration) Timer {
	t := &skewTimer{clock: s, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in its own goroutine (over a Fake: from Advance) when
// the skewed clock has advanced d.
func (s *Skewed) AfterFunc(d time.Duration, f func()) Timer {
	t := &skewTimer{clock: s, fn: f}
	t.Reset(d)
	return t
}

// After returns NewTimer(d).C().
func (s *Skewed) After(d time.Duration) <-chan time.Time { return s.NewTimer(d).C() }

// NewTicker returns a ticker firing every d of skewed time. It panics if
// d <= 0.
func (s *Skewed) NewTicker(d time.Duration) Ticker {
	k := skewTicker{&skewTimer{clock: s, c: make(chan time.Time, 1)}}
	k.Reset(d)
	return k
}

// skewTimer is a Skewed's timer, AfterFunc or (period > 0) ticker, carried
// by an AfterFunc of the base clock that is rearmed on every rate change.
type skewTimer struct {
	clock *Skewed
	c     chan time.Time // nil for AfterFunc
	fn    func()         // nil unless AfterFunc

	// Guarded by clock.mu:
	period   time.Duration // > 0 for a ticker
	deadline time.Duration // skewed elapsed time at which it fires
	base     Timer         // the base timer carrying it; nil when disarmed
	gen      uint64        // incremented on every arm: a base firing of an older one is stale
	seq      uint64        // clock.seq when last set by Reset: the order SetRate rearms in
}

func (t *skewTimer) C() <-chan time.Time { return t.c }

func (t *skewTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.stopLocked()
}

func (t *skewTimer) Reset(d time.Duration) bool {
	s := t.clock
	s.mu.Lock()
	defer s.mu.Unlock()
	wasArmed := t.stopLocked()
	t.deadline = s.elapsedLocked(s.base.Now()) + max(d, 0)
	t.addLocked()
	return wasArmed
}

// addLocked records t as pending, after every timer armed before it, and
// arms it. clock.mu must be held.
func (t *skewTimer) addLocked() {
	s := t.clock
	s.seq++
	t.seq = s.seq
	s.timers[t] = struct{}{}
	t.armLocked()
}

// stopLocked disarms t and empties its channel. clock.mu must be held.
func (t *skewTimer) stopLocked() bool {
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	return t.disarmLocked()
}

// disarmLocked stops t's base timer and reports whether t was armed.
// clock.mu must be held.
func (t *skewTimer) disarmLocked() bool {
	if t.base == nil {
		return false
	}
	t.base.Stop()
	t.base = nil
	t.gen++
	delete(t.clock.timers, t)
	return true
}

// armLocked (re)starts the base timer for the base time the skewed clock
// needs to reach t's deadline at the current rate. clock.mu must be held.
func (t *skewTimer) armLocked() {
	s := t.clock
	if t.base != nil {
		t.base.Stop()
	}
	t.gen++
	gen := t.gen
	left := t.deadline - s.elapsedLocked(s.base.Now())
	t.base = s.base.AfterFunc(baseWait(left, s.rate), func() { t.fire(gen) })
}

// baseWait is the base time in which a clock running at rate covers left,
// rounded up and capped at the longest Duration.
func baseWait(left time.Duration, rate float64) time.Duration {
	wait := math.Ceil(float64(max(left, 0)) / rate)
	if wait >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(wait)
}

// fire runs when the base timer of arm gen expires.
func (t *skewTimer) fire(gen uint64) {
	s := t.clock
	s.mu.Lock()
	if gen != t.gen || t.base == nil {
		s.mu.Unlock()
		return // stopped or rearmed since
	}
	elapsed := s.elapsedLocked(s.base.Now())
	if elapsed < t.deadline {
		t.armLocked() // rounding left it short
		s.mu.Unlock()
		return
	}
	now := s.start.Add(elapsed)
	if t.period > 0 {
		for t.deadline <= elapsed {
			t.deadline += t.period
		}
		t.armLocked()
	} else {
		t.disarmLocked()
	}
	fn := t.fn
	if fn == nil {
		select {
		case t.c <- now:
		default: // the receiver has not taken the last one: drop, as time.Ticker
		}
	}
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// skewTicker is a skewTimer with a period.
type skewTicker struct{ t *skewTimer }

func (k skewTicker) C() <-chan time.Time { return k.t.c }

func (k skewTicker) Stop() { k.t.Stop() }

func (k skewTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("clock: non-positive ticker period %v", d))
	}
	s := k.t.clock
	s.mu.Lock()
	defer s.mu.Unlock()
	k.t.stopLocked()
	k.t.period = d
	k.t.deadline = s.elapsedLocked(s.base.Now()) + d
	k.t.addLocked()
}
