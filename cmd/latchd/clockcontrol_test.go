package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/httpapi"
)

func TestParseClockSettings(t *testing.T) {
	good := map[string]clockSettings{
		"":                   {rate: 1},
		"rate=0.5":           {rate: 0.5},
		"wall=-1h":           {rate: 1, wall: -time.Hour},
		" rate=2  wall=1h\n": {rate: 2, wall: time.Hour},
	}
	for text, want := range good {
		got, err := parseClockSettings(text)
		if err != nil || got != want {
			t.Errorf("parseClockSettings(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{"rate", "rate=0", "rate=-1", "rate=NaN", "rate=1e9", "wall=1", "speed=2", "rate=x"} {
		if _, err := parseClockSettings(bad); err == nil {
			t.Errorf("parseClockSettings(%q) accepted", bad)
		}
	}
}

// TestClockControl: the flag makes the server's clock a controlled one; the
// file's rate and wall offset are applied as they change, a bad file is
// ignored (the clock keeps its settings), and a missing one means normal.
func TestClockControl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	cfg, _, _, err := parseFlags([]string{"--unsafe-clock-control", path}, new(httpapi.DefaultLimits()), new(securityFlags), new(zkOptions))
	if err != nil {
		t.Fatal(err)
	}
	controlled, ok := cfg.Clock.(controlledClock)
	if !ok {
		t.Fatalf("--unsafe-clock-control: clock is %T, want controlledClock", cfg.Clock)
	}
	control := controlled.control
	control.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		control.apply()
	}
	offset := func() time.Duration { return time.Until(controlled.Wall()).Round(time.Minute) }

	control.apply() // no file yet
	if controlled.Rate() != 1 || offset() != 0 {
		t.Fatalf("without a file: rate %v, wall offset %v; want 1, 0", controlled.Rate(), offset())
	}
	write("rate=2 wall=1h")
	if controlled.Rate() != 2 || offset() != time.Hour {
		t.Fatalf("rate=2 wall=1h: rate %v, wall offset %v", controlled.Rate(), offset())
	}
	write("rate=oops")
	if controlled.Rate() != 2 || offset() != time.Hour {
		t.Fatalf("a bad file changed the clock: rate %v, wall offset %v", controlled.Rate(), offset())
	}
	write("rate=0.5 wall=-1h")
	if controlled.Rate() != 0.5 || offset() != -time.Hour {
		t.Fatalf("rate=0.5 wall=-1h: rate %v, wall offset %v", controlled.Rate(), offset())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	control.apply()
	if controlled.Rate() != 1 || offset() != 0 {
		t.Fatalf("file removed: rate %v, wall offset %v; want 1, 0", controlled.Rate(), offset())
	}
}
