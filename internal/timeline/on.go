//go:build latchtimeline

package timeline

import (
	"bufio"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Enabled reports whether the recorder is compiled in (build tag latchtimeline).
const Enabled = true

// MaxEvents bounds the marks one process records; later ones are dropped.
const MaxEvents = 1 << 21

var (
	recording = os.Getenv("LATCH_TIMELINE") != ""
	events    [MaxEvents]Event
	next      atomic.Int64
)

// Mark records that the calling code reached s, if $LATCH_TIMELINE is set.
func Mark(s Stage) {
	if !recording {
		return
	}
	if i := next.Add(1) - 1; i < MaxEvents {
		events[i] = Event{At: time.Now().UnixNano(), Stage: s}
	}
}

// Dump writes the recorded marks, one "nanoseconds stage" line each, to the
// file $LATCH_TIMELINE names. Call it once marking has stopped.
func Dump() error {
	path := os.Getenv("LATCH_TIMELINE")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, e := range events[:min(next.Load(), MaxEvents)] {
		fmt.Fprintf(w, "%d %c\n", e.At, e.Stage)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("timeline: write %s: %w", path, err)
	}
	return f.Close()
}
