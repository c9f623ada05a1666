package chaos

import (
	"errors"
	"time"
)

// Clock faults. A member's clock is skewed through latchd's test-only
// --unsafe-clock-control (proccluster.SetClock): its monotonic clock runs
// at another rate, so its raft ticks, session deadlines and leader-stall
// detection run fast or slow; or its wall clock jumps, which may move
// timestamps only. A lock client's clock is skewed in the lock workload
// (check.ClientSkewer): its heartbeats and its work are paced by a slow
// clock, so it writes on after its session expired. Safety rests on the log
// and fencing tokens, never on clocks: every checker stays green; spurious
// session expiries and lock tenures overlapping in real time are counted,
// stale-token writes accepted must stay 0.

const (
	fastClock  = 2.0       // clock-fast-leader: a fast leader expires sessions early
	slowClock  = 0.5       // clock-slow-leader: a slow leader keeps them longer
	wallJump   = time.Hour // clock-jump: either way
	slowClient = 0.1       // clock-skew-lock-client: a lock client's clock at a tenth of real time
)

// clockFaults are the clock fault kinds this run can make.
func (r *run) clockFaults() []fault {
	if !r.cfg.ClockFaults {
		return nil
	}
	out := []fault{
		{"clock-fast-leader", func(r *run) (func() error, error) { return r.withLeader(r.skewRate(fastClock)) }},
		{"clock-slow-leader", func(r *run) (func() error, error) { return r.withLeader(r.skewRate(slowClock)) }},
		{"clock-jump", (*run).jumpWallClock},
	}
	if r.lockSkewer != nil {
		out = append(out, fault{"clock-skew-lock-client", (*run).skewLockClient})
	}
	if r.lockHolders != nil {
		out = append(out, fault{"clock-skew-lock-proc", (*run).skewLockProc})
	}
	return out
}

// skewRate returns a fault that runs member i's clock at rate until healed.
func (r *run) skewRate(rate float64) func(i int) (func() error, error) {
	return func(i int) (func() error, error) {
		if err := r.cluster.SetClock(i, rate, 0); err != nil {
			return nil, err
		}
		r.Logf("chaos: %s's clock runs at %vx", r.cluster.Members[i].Name, rate)
		return func() error { return r.cluster.SetClock(i, 1, 0) }, nil
	}
}

// jumpWallClock moves a random member's wall clock an hour forward or back;
// the heal moves it back.
func (r *run) jumpWallClock() (func() error, error) {
	i := r.faults.IntN(len(r.cluster.Members))
	jump := wallJump
	if r.faults.IntN(2) == 0 {
		jump = -jump
	}
	if err := r.cluster.SetClock(i, 1, jump); err != nil {
		return nil, err
	}
	r.Logf("chaos: %s's wall clock jumps by %v", r.cluster.Members[i].Name, jump)
	return func() error { return r.cluster.SetClock(i, 1, 0) }, nil
}

// skewLockClient makes the lock workload's clients run on a slow clock
// until healed.
func (r *run) skewLockClient() (func() error, error) {
	if r.lockSkewer == nil {
		return nil, errors.New("no lock workload")
	}
	r.lockSkewer.SkewClients(slowClient)
	return func() error { r.lockSkewer.SkewClients(1); return nil }, nil
}
