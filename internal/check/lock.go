package check

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/fencing"
	"github.com/latch-io/latch/internal/clock"
)

// locks is workload F: clients acquire one lock, write through a
// fencing.Guard-protected resource with their token, and release. Some
// holders stall past their session timeout (as a SIGSTOPped client would:
// no heartbeats, no work), wait until a later holder wrote, then write
// with their old token: the guard must refuse it. While SkewClients has
// set a rate, every client runs on a clock at that rate (heartbeats and
// work paced by it): a slow one keeps working, and writing, long after its
// session expired.
type locks struct {
	unchecked bool // planted bug (c): a guard that accepts every token

	guard *LoggingGuard

	mu         sync.Mutex          // guards grants and overlapped
	grants     map[uint64]string   // fencing token -> session granted it
	overlapped map[uint64]struct{} // tokens whose holder wrote after a later token was granted

	highestGrant atomic.Uint64 // the highest token granted so far
	skewRate     atomic.Uint64 // math.Float64bits of the clients' clock rate; 0: real clocks
	stalls       atomic.Int64  // holders that stalled past their session timeout
	skewedHolds  atomic.Int64  // tenures held by a client on a skewed clock
	refused      atomic.Int64  // writes the guard refused as stale
}

// ClientSkewer is a workload whose clients' clocks a fault can skew.
type ClientSkewer interface {
	// SkewClients makes the clients that start a session from now on run
	// on a clock at rate times real time; 1 ends the skew.
	SkewClients(rate float64)
}

// SkewClients implements ClientSkewer.
func (w *locks) SkewClients(rate float64) {
	if rate == 1 {
		rate = 0
	}
	w.skewRate.Store(math.Float64bits(rate))
}

// clientClock is the clock a client starting a session now runs on: nil
// for the real one.
func (w *locks) clientClock() clock.Clock {
	rate := math.Float64frombits(w.skewRate.Load())
	if rate == 0 {
		return nil
	}
	skewed := clock.NewSkewed(clock.Real())
	if err := skewed.SetRate(rate); err != nil {
		return nil
	}
	return skewed
}

// skewedWork is how long, by its own clock, a skewed holder works holding
// the lock, writing every skewedWrite.
const (
	skewedWork  = time.Second
	skewedWrite = 100 * time.Millisecond
)

const (
	lockClients  = 3
	lockResource = "chaos-resource"
)

// LoggingGuard records, in order, every token its inner guard accepted.
type LoggingGuard struct {
	inner interface {
		fencing.Guard
		Highest(resource string) (uint64, bool)
	}
	mu       sync.Mutex // guards accepted; held across inner.Accept so the log order is the accept order
	accepted []uint64
}

func (g *LoggingGuard) Accept(resource string, token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.inner.Accept(resource, token); err != nil {
		return err
	}
	g.accepted = append(g.accepted, token)
	return nil
}

// Check implements fencing.Guard (for fencing.Middleware); it records nothing.
func (g *LoggingGuard) Check(resource string, token uint64) error {
	return g.inner.Check(resource, token)
}

// Highest is the highest token accepted for resource (0 if none).
func (g *LoggingGuard) Highest(resource string) uint64 {
	token, _ := g.inner.Highest(resource)
	return token
}

// NewLoggingGuard returns a LoggingGuard over a fencing.Memory, or over an
// uncheckedGuard when unchecked (planted bug (c)).
func NewLoggingGuard(unchecked bool) *LoggingGuard {
	if unchecked {
		return &LoggingGuard{inner: uncheckedGuard{fencing.NewMemory()}}
	}
	return &LoggingGuard{inner: fencing.NewMemory()}
}

// uncheckedGuard is planted bug (c): it skips the fencing check.
type uncheckedGuard struct{ *fencing.Memory }

func (g uncheckedGuard) Accept(resource string, token uint64) error {
	if highest, _ := g.Memory.Highest(resource); token < highest {
		return nil // accepted without raising the highest: the check is skipped
	}
	return g.Memory.Accept(resource, token)
}

func (w *locks) Start(r *Run) {
	w.grants = map[uint64]string{}
	w.overlapped = map[uint64]struct{}{}
	w.guard = NewLoggingGuard(w.unchecked)
	for c := range lockClients {
		r.Workers.Add(1)
		go w.client(r, c)
	}
}

func (w *locks) client(r *Run, worker int) {
	defer r.Workers.Done()
	var s *Session
	for !r.Stopped() {
		if s != nil && s.skewed != (w.skewRate.Load() != 0) {
			s.Stop() // the skew began or ended: a new session on the right clock
			s.Close(r)
			s = nil
		}
		if s == nil || s.Expired() {
			if s != nil {
				s.Stop()
			}
			if s = newSessionOn(r, SessionTimeout, w.clientClock()); s == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		w.round(r, s, worker)
	}
	if s != nil {
		s.Stop()
		s.Close(r)
	}
}

// round is one acquire -> write -> release by session s.
func (w *locks) round(r *Run, s *Session, worker int) {
	ctx, cancel := RequestContext()
	defer cancel()
	var held api.Lock
	err := r.Call(ctx, http.MethodPost, r.Node(), "/v1/lock/acquire", nil,
		&api.LockRequest{Name: r.LockName, SessionID: s.ID, WaitMs: 1000}, &held)
	if err != nil || !held.Held {
		if Code(err) == api.CodeSessionExpired {
			s.SawExpired(r)
		}
		return
	}
	w.grant(r, held.FencingToken, s.ID)
	switch {
	case s.skewed:
		w.workSkewed(r, s, held.FencingToken)
	case r.Intn(6) == 0:
		w.stall(r, s, held.FencingToken)
		return
	default:
		w.write(held.FencingToken)
	}
	ctx2, cancel2 := RequestContext()
	defer cancel2()
	_ = r.Call(ctx2, http.MethodPost, r.Node(), "/v1/lock/release", nil,
		&api.LockRequest{Name: r.LockName, SessionID: s.ID, FencingToken: held.FencingToken}, nil)
}

// grant records that token was granted to session; a token granted to two
// sessions is an anomaly of the lock itself.
func (w *locks) grant(r *Run, token uint64, session string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if other, ok := w.grants[token]; ok && other != session {
		r.Anomaly("F: fencing token %d granted to sessions %s and %s", token, other, session)
	}
	w.grants[token] = session
	for {
		highest := w.highestGrant.Load()
		if token <= highest || w.highestGrant.CompareAndSwap(highest, token) {
			break
		}
	}
}

// workSkewed plays a holder whose clock runs slow: it works skewedWork by
// its own clock, writing every skewedWrite, never asking whether it still
// holds the lock (its heartbeats, paced by the same clock, may have let its
// session expire long before).
func (w *locks) workSkewed(r *Run, s *Session, token uint64) {
	w.skewedHolds.Add(1)
	ticker := s.clock.NewTicker(skewedWrite)
	defer ticker.Stop()
	for start := s.clock.Now(); s.clock.Since(start) < skewedWork && !r.Stopped(); {
		w.write(token)
		select {
		case <-ticker.C():
		case <-r.Stopping():
		}
	}
}

// write accepts token at the guard, counting refusals and tenures that
// overlap in real time: a write with token after a later one was granted.
func (w *locks) write(token uint64) {
	if w.highestGrant.Load() > token {
		w.mu.Lock()
		w.overlapped[token] = struct{}{}
		w.mu.Unlock()
	}
	err := w.guard.Accept(lockResource, token)
	if errors.Is(err, fencing.ErrStaleToken) {
		w.refused.Add(1)
	}
}

// stall plays a holder frozen past its session timeout: it stops
// heartbeating, waits until a later holder wrote (or a bound passes), then
// writes with its old token, believing it still holds the lock.
func (w *locks) stall(r *Run, s *Session, token uint64) {
	w.stalls.Add(1)
	s.PauseHeartbeats()
	deadline := time.Now().Add(4 * s.Timeout())
	for time.Now().Before(deadline) && w.guard.Highest(lockResource) <= token && !r.Stopped() {
		time.Sleep(50 * time.Millisecond)
	}
	w.write(token)
	s.MarkExpired()
}

// CheckOrder is checker F's core, shared by the lock and lockproc
// workloads: the tokens g accepted, in accept order, never go below one
// accepted before. Each that does is a stale write accepted, added to the
// report's StaleWrites and named in an "F:" anomaly (the first five). It
// returns how many writes g accepted and how many of them were stale. Call
// it once the writers stopped.
func (g *LoggingGuard) CheckOrder(r *Run, workload string) (accepted, stale int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var highest uint64
	for i, token := range g.accepted {
		if token < highest {
			stale++
			if stale <= 5 {
				r.Anomaly("F: guard accepted token %d after token %d (write %d of %d, %s workload)", token, highest, i+1, len(g.accepted), workload)
			}
		}
		highest = max(highest, token)
	}
	r.Update(func(report *Report) { report.StaleWrites += stale })
	return len(g.accepted), stale
}

func (w *locks) Check(r *Run) error {
	accepted, stale := w.guard.CheckOrder(r, "lock")
	r.Report.Operations += accepted + int(w.refused.Load())
	r.Report.Overlaps += int(w.refused.Load())
	r.Report.OverlappingTenures += len(w.overlapped)
	r.Report.SkewedLockHolds += int(w.skewedHolds.Load())
	r.Logf("check F: %d writes accepted, %d stale writes refused by the guard, %d holders stalled past their session, %d grants; %d stale accepted",
		accepted, w.refused.Load(), w.stalls.Load(), len(w.grants), stale)
	if accepted == 0 {
		return fmt.Errorf("F: no write went through the lock")
	}
	return nil
}
