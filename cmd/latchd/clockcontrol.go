package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/latch-io/latch/internal/clock"
)

// The hidden, test-only --unsafe-clock-control FILE makes latchd's clock a
// clock.Skewed over the real one, driven by FILE: the fault suite skews one
// member's clock through it. FILE holds one line of settings, each
// key=value, for example
//
//	rate=0.5 wall=-1h
//
// rate is the clock's speed against real time (positive; 1 when absent),
// wall the total offset of the wall clock (a duration; 0 when absent). A
// missing or empty file means rate 1 and no offset. latchd reads FILE every
// clockControlPoll and applies what changed: a new rate from that moment on,
// a new wall offset as one jump by the difference. A file it cannot parse is
// logged and ignored (the clock keeps its settings): a test harness writes
// it, and a bad write must not stop a member.

// clockControlPoll is how often the control file is read.
const clockControlPoll = 50 * time.Millisecond

// clockSettings are the contents of a control file.
type clockSettings struct {
	rate float64       // speed against real time
	wall time.Duration // total wall-clock offset
}

// parseClockSettings parses a control file's contents.
func parseClockSettings(text string) (clockSettings, error) {
	settings := clockSettings{rate: 1}
	for _, field := range strings.Fields(text) {
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			return clockSettings{}, fmt.Errorf("%q: want key=value", field)
		}
		switch key {
		case "rate":
			rate, err := strconv.ParseFloat(value, 64)
			if err != nil || !(rate > 0) || rate > 1000 {
				return clockSettings{}, fmt.Errorf("rate %q: want a number above 0, at most 1000", value)
			}
			settings.rate = rate
		case "wall":
			offset, err := time.ParseDuration(value)
			if err != nil {
				return clockSettings{}, fmt.Errorf("wall %q: %w", value, err)
			}
			settings.wall = offset
		default:
			return clockSettings{}, fmt.Errorf("unknown setting %q (want rate or wall)", key)
		}
	}
	return settings, nil
}

// clockControl applies a control file's settings to a Skewed clock.
type clockControl struct {
	path    string
	clock   *clock.Skewed
	logger  *slog.Logger
	applied clockSettings // what the clock runs with now
	lastErr string        // the last parse error logged, so it is logged once
}

func newClockControl(path string, logger *slog.Logger) *clockControl {
	return &clockControl{path: path, clock: clock.NewSkewed(clock.Real()), logger: logger, applied: clockSettings{rate: 1}}
}

// apply reads the file once and applies what changed.
func (c *clockControl) apply() {
	data, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		data, err = nil, nil
	}
	var settings clockSettings
	if err == nil {
		settings, err = parseClockSettings(string(data))
	}
	if err != nil {
		if msg := err.Error(); msg != c.lastErr {
			c.logger.Warn("clock control file ignored", "file", c.path, "err", err)
			c.lastErr = msg
		}
		return
	}
	c.lastErr = ""
	if settings.rate != c.applied.rate {
		if err := c.clock.SetRate(settings.rate); err != nil {
			c.logger.Warn("clock control: rate refused", "err", err)
			return
		}
		c.logger.Warn("clock control: clock rate changed (test only)", "rate", settings.rate)
	}
	if jump := settings.wall - c.applied.wall; jump != 0 {
		c.clock.Jump(jump)
		c.logger.Warn("clock control: wall clock jumped (test only)", "by", jump, "offset", settings.wall)
	}
	c.applied = settings
}

// follow applies the file every clockControlPoll until done closes.
func (c *clockControl) follow(done <-chan struct{}) {
	ticker := time.NewTicker(clockControlPoll)
	defer ticker.Stop()
	for {
		c.apply()
		select {
		case <-done:
			return
		case <-ticker.C:
		}
	}
}

// controlledClock is latchd's clock under --unsafe-clock-control: the
// Skewed clock the server runs on, with the control that drives it.
type controlledClock struct {
	*clock.Skewed
	control *clockControl
}

// clockControlFlag is --unsafe-clock-control: setting it makes cfgClock a
// controlledClock following the named file.
type clockControlFlag struct {
	cfgClock *clock.Clock // the server.Config's Clock
	path     string
}

func (f *clockControlFlag) String() string { return f.path }

func (f *clockControlFlag) Set(path string) error {
	if path == "" {
		return errors.New("want a file path")
	}
	f.path = path
	control := newClockControl(path, slog.Default())
	*f.cfgClock = controlledClock{Skewed: control.clock, control: control}
	return nil
}

// followClockControl starts following the control file when the server's
// clock is controlled, logging to logger, until done closes.
func followClockControl(c clock.Clock, logger *slog.Logger, done <-chan struct{}) {
	controlled, ok := c.(controlledClock)
	if !ok {
		return
	}
	controlled.control.logger = logger
	controlled.control.apply() // the settings at start hold before the server reads the clock
	go controlled.control.follow(done)
}
