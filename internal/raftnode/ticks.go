package raftnode

import (
	"sync"
	"time"

	"github.com/latch-io/latch/internal/clock"
)

// Ticks is one clock ticker shared by the nodes of every group of a process:
// a process with N groups keeps one timer, not N, and every group ticks at
// the same instants. Each subscriber has a one-slot channel; a tick finding
// the slot full is dropped for that subscriber, as time.Ticker drops ticks
// for a slow reader, so a node stuck in a long fsync never blocks the others.
type Ticks struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{} // guarded by mu
	stop   chan struct{}
	done   chan struct{}
	ticker clock.Ticker
}

// NewTicks starts a shared ticker of interval on clk. Stop it with Stop.
func NewTicks(clk clock.Clock, interval time.Duration) *Ticks {
	t := &Ticks{
		subs:   map[chan struct{}]struct{}{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		ticker: clk.NewTicker(interval),
	}
	go t.run()
	return t
}

func (t *Ticks) run() {
	defer close(t.done)
	defer t.ticker.Stop()
	for {
		select {
		case <-t.ticker.C():
			t.fanOut()
		case <-t.stop:
			return
		}
	}
}

func (t *Ticks) fanOut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.subs {
		select {
		case c <- struct{}{}:
		default: // the subscriber has not taken the previous tick
		}
	}
}

// subscribe returns a channel that receives the ticks, and its cancel.
func (t *Ticks) subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs[c] = struct{}{}
	t.mu.Unlock()
	return c, func() {
		t.mu.Lock()
		delete(t.subs, c)
		t.mu.Unlock()
	}
}

// Stop stops the ticker and waits for its goroutine.
func (t *Ticks) Stop() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}
