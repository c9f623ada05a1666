package proccluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ErrNoClockControl means SetClock was called on a cluster started without
// Options.ClockControl.
var ErrNoClockControl = errors.New("proccluster: the cluster runs without clock control (Options.ClockControl)")

// clockPathLocked is where member m's clock control file lives: beside its
// data directory, named after its current name. m.mu must be held, or m not
// renamed concurrently (see Member).
func clockPathLocked(m *Member) string {
	return filepath.Join(filepath.Dir(m.DataDir), m.Name+".clock")
}

// SetClock makes member i's clock run at rate times real time and its wall
// clock read wall off real time (latchd's --unsafe-clock-control): rate 1
// and wall 0 are a normal clock. The setting survives restarts of the
// member; latchd reads it within 50ms (SetClock does not wait for that).
// The cluster must have been started with Options.ClockControl.
func (c *Cluster) SetClock(i int, rate float64, wall time.Duration) error {
	if !c.opts.ClockControl {
		return ErrNoClockControl
	}
	m := c.Members[i]
	m.mu.Lock()
	path := clockPathLocked(m)
	m.mu.Unlock()
	text := "rate=" + strconv.FormatFloat(rate, 'g', -1, 64) + " wall=" + wall.String() + "\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return fmt.Errorf("proccluster: write clock control of %s: %w", m.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil { // latchd never reads a half-written file
		return fmt.Errorf("proccluster: install clock control of %s: %w", m.Name, err)
	}
	return nil
}
