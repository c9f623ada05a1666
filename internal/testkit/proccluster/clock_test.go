package proccluster

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSetClock: a member started with clock control applies what SetClock
// writes (latchd logs each change it applies), and a cluster without it
// refuses SetClock.
func TestSetClock(t *testing.T) {
	c := Start(t, Options{Nodes: 1, ClockControl: true})
	c.WaitLeader(30 * time.Second)
	if err := c.SetClock(0, 2, -time.Hour); err != nil {
		t.Fatal(err)
	}
	waitLog(t, c.Members[0].LogPath, "clock rate changed", "rate=2")
	waitLog(t, c.Members[0].LogPath, "wall clock jumped", "offset=-1h0m0s")
	if err := c.SetClock(0, 1, 0); err != nil {
		t.Fatal(err)
	}
	waitLog(t, c.Members[0].LogPath, "clock rate changed", "rate=1")

	plain := Start(t, Options{Nodes: 1})
	if err := plain.SetClock(0, 2, 0); err != ErrNoClockControl {
		t.Fatalf("SetClock without clock control: %v, want ErrNoClockControl", err)
	}
}

// waitLog waits until a line of the log at path contains every one of parts.
func waitLog(t *testing.T, path string, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(data), "\n") {
			found := true
			for _, part := range parts {
				found = found && strings.Contains(line, part)
			}
			if found {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line with %q in %s within 30s:\n%s", parts, path, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
