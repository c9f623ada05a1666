package compose

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/latch-io/latch/client"
)

// writer puts a fresh key every interval until stopped and records which
// writes were acknowledged and when writes failed.
type writer struct {
	client   *client.Client
	interval time.Duration

	mu       sync.Mutex // guards the fields below
	acked    map[string]string
	failures []time.Time
	lastOK   time.Time     // completion of the latest acknowledged write
	longest  time.Duration // longest stretch between acknowledged writes
	maxIndex uint64        // highest index an acknowledged write got
}

func newWriter(c *client.Client, interval time.Duration) *writer {
	return &writer{client: c, interval: interval, acked: map[string]string{}}
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) {
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		key, value := fmt.Sprintf("/compose/k%06d", i), fmt.Sprintf("v%d", i)
		writeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		node, err := w.client.Put(writeCtx, key, value)
		cancel()
		if ctx.Err() != nil {
			return // the write may or may not have happened; not counted
		}
		var index uint64
		if err == nil {
			index = node.Index
		}
		w.record(key, value, index, err)
	}
}

// record notes the outcome of one write (index is ignored on error).
func (w *writer) record(key, value string, index uint64, err error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failures = append(w.failures, now)
		return
	}
	w.acked[key] = value
	w.maxIndex = max(w.maxIndex, index)
	if !w.lastOK.IsZero() {
		w.longest = max(w.longest, now.Sub(w.lastOK))
	}
	w.lastOK = now
}

// mark starts measuring a phase: it returns a function that reports the
// failed writes since mark and the acknowledged writes so far.
func (w *writer) mark() func() (failed, acked int) {
	start := time.Now()
	return func() (failed, acked int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, at := range w.failures {
			if !at.Before(start) {
				failed++
			}
		}
		return failed, len(w.acked)
	}
}

// ackedCount returns how many writes were acknowledged so far.
func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// snapshot returns a copy of the acknowledged writes and summary figures.
func (w *writer) snapshot() (acked map[string]string, failures int, longest time.Duration, maxIndex uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked = make(map[string]string, len(w.acked))
	for k, v := range w.acked {
		acked[k] = v
	}
	return acked, len(w.failures), w.longest, w.maxIndex
}
