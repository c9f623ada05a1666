package clock

import (
	"strings"
	"testing"
	"time"
)

// TestRealReadings: Real's Now carries Go's monotonic reading (so a change
// of the system clock does not move elapsed time) and its Wall does not.
func TestRealReadings(t *testing.T) {
	c := Real()
	if s := c.Now().String(); !strings.Contains(s, "m=") {
		t.Errorf("Real().Now() %s has no monotonic reading", s)
	}
	if s := c.Wall().String(); strings.Contains(s, "m=") {
		t.Errorf("Real().Wall() %s carries a monotonic reading", s)
	}
	if s := NewSkewed(c).Now().String(); !strings.Contains(s, "m=") {
		t.Errorf("a Skewed clock over Real reads %s, without a monotonic reading", s)
	}
}

// TestRealAndSkewedTimersFire checks the real-time plumbing with short
// timers, waiting with a generous deadline.
func TestRealAndSkewedTimersFire(t *testing.T) {
	skewed := NewSkewed(Real())
	if err := skewed.SetRate(2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		clock Clock
	}{
		{"real", Real()},
		{"skewed over real", skewed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := tt.clock.Now()
			tk := tt.clock.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			for _, ch := range []<-chan time.Time{tt.clock.NewTimer(10 * time.Millisecond).C(), tk.C()} {
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
					t.Fatal("no delivery within 10s")
				}
			}
			if got := tt.clock.Since(start); got < 10*time.Millisecond {
				t.Fatalf("a 10ms timer fired after %v", got)
			}
		})
	}
}
