package testcluster

import (
	"fmt"
	"time"
)

// Virtual time (Options.Time): the nodes' clocks stand still until the test
// advances the fake clock. Advancing goes one raft tick at a time, and after
// each tick waits until every running node's raft has taken it, so the
// nodes see time pass evenly (a follower never misses the leader's
// heartbeat ticks and campaigns) and no leader looks stalled.

// Virtual reports whether the cluster runs in virtual time.
func (c *Cluster) Virtual() bool { return c.opts.Time != nil }

// Now is the virtual time (the real time without Options.Time).
func (c *Cluster) Now() time.Time {
	if c.opts.Time == nil {
		return time.Now()
	}
	return c.opts.Time.Now()
}

// Advance moves virtual time forward by d, a tick at a time; without
// Options.Time it fails the test.
func (c *Cluster) Advance(d time.Duration) {
	c.t.Helper()
	if c.opts.Time == nil {
		c.t.Fatal("testcluster: Advance needs Options.Time")
	}
	for d > 0 {
		step := min(d, c.opts.TickInterval)
		c.tick(step)
		d -= step
	}
}

// AdvanceUntil waits until cond holds or timeout (real time) passes: in
// virtual time it advances a tick between looks, so conditions that take
// time (an election, an expiry) come about; otherwise it polls.
func (c *Cluster) AdvanceUntil(timeout time.Duration, cond func() bool) bool {
	if c.opts.Time == nil {
		return waitFor(timeout, cond)
	}
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		c.tick(c.opts.TickInterval)
		time.Sleep(100 * time.Microsecond) // lets messages in flight land between ticks
	}
}

// Stall tells Advance that node i's Ready loop is stalled on purpose (an
// fsync the test holds, vfs.Fault.Hold): virtual time goes on for the
// others without waiting for it to tick. The returned function, called
// once the stall is released, makes Advance wait for node i again.
func (c *Cluster) Stall(i int) (resume func()) {
	c.Nodes[i].stalled = true
	return func() { c.Nodes[i].stalled = false }
}

// tick advances the fake clock by d (at most a tick) and waits until every
// running node's raft ticked at its clock's new reading.
func (c *Cluster) tick(d time.Duration) {
	c.t.Helper()
	c.opts.Time.Advance(d)
	for _, i := range c.Running() {
		n := c.Nodes[i]
		s := n.Server
		if n.stalled {
			continue // stalled on purpose (Stall): it ticks again once it resumes
		}
		select {
		case <-s.Done():
			continue // stopped on its own (removed, or a fatal error): it ticks no more
		default:
		}
		// A node that has not ticked since it started may not have armed its
		// ticker yet (its Ready loop starts on its own goroutine): it ticks
		// from a later step on, so it is not waited for. Nor is a node that
		// stops on its own meanwhile (it applied its own removal, or failed).
		ok := pollFast(10*time.Second, func() bool {
			last := s.LastTick()
			return n.Clock.Since(last) < c.opts.TickInterval || last.Equal(n.started) || s.Err() != nil
		})
		if !ok {
			c.t.Fatalf("testcluster: %s did not tick at %v (last tick %v, %d timers pending): %s", n.Name, fmt.Sprint(n.Clock.Now()), s.LastTick(), c.opts.Time.Pending(), c.describe())
		}
	}
}

// pollFast is waitFor for the conditions of a tick, which hold within
// microseconds: it polls far more often.
func pollFast(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return true
}
