//go:build latchtimeline

package timeline

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRecorderRoundTrip(t *testing.T) {
	recording = true
	defer func() { recording = false; next.Store(0) }()
	next.Store(0)
	Mark(Propose)
	Mark(SaveStart)
	Mark(Answered)
	path := filepath.Join(t.TempDir(), "n1")
	t.Setenv("LATCH_TIMELINE", path)
	if err := Dump(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := Parse(f, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[0].Stage != Propose || events[2].Stage != Answered || events[2].At < events[0].At {
		t.Fatalf("read back %v, want Propose, SaveStart, Answered in time order", events)
	}
}
