package zkserver

import (
	"sync"
	"sync/atomic"
)

// runners runs the requests of a listener's connections on goroutines
// kept from earlier requests. A request handed to a fresh goroutine grows
// its stack from the minimum on every call (proposing a write goes deep
// enough for two or three doublings, each a copy: 4% of the servers' CPU
// under pipelined writes); a kept goroutine has grown already. At most
// maxIdle goroutines wait for work, so a quiet listener holds little, and
// all of them end at stop.
type runners struct {
	work    chan func() // unbuffered: a send succeeds only to a waiting runner
	quit    chan struct{}
	stopped sync.Once
	idle    atomic.Int32
	maxIdle int32
}

func newRunners(maxIdle int32) *runners {
	return &runners{work: make(chan func()), quit: make(chan struct{}), maxIdle: maxIdle}
}

// do runs f on a waiting runner, or on a new one if none waits.
func (r *runners) do(f func()) {
	select {
	case r.work <- f:
	default:
		go r.run(f)
	}
}

// run runs f, then waits for more work while fewer than maxIdle others
// wait, until stop.
func (r *runners) run(f func()) {
	for {
		f()
		if r.idle.Add(1) > r.maxIdle {
			r.idle.Add(-1)
			return
		}
		select {
		case f = <-r.work:
			r.idle.Add(-1)
		case <-r.quit:
			r.idle.Add(-1)
			return
		}
	}
}

// stop ends the waiting runners; a runner busy with a request ends after
// it. do must not be called after stop.
func (r *runners) stop() {
	r.stopped.Do(func() { close(r.quit) })
}
