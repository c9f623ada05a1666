package clock

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// newSkewedFake returns a Skewed over a Fake, the deterministic pair.
func newSkewedFake(t *testing.T, rate float64) (*Skewed, *Fake) {
	t.Helper()
	base := NewFake(epoch)
	s := NewSkewed(base)
	if err := s.SetRate(rate); err != nil {
		t.Fatal(err)
	}
	return s, base
}

func TestSkewedRate(t *testing.T) {
	tests := []struct {
		name        string
		rate        float64
		baseAdvance time.Duration
		wantElapsed time.Duration
	}{
		{"half speed", 0.5, 2 * time.Second, time.Second},
		{"real speed", 1, time.Second, time.Second},
		{"double speed", 2, time.Second, 2 * time.Second},
		{"slightly fast", 1.1, 10 * time.Second, 11 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, base := newSkewedFake(t, tt.rate)
			start := s.Now()
			base.Advance(tt.baseAdvance)
			if got := s.Since(start); got != tt.wantElapsed {
				t.Errorf("Since %v, want %v", got, tt.wantElapsed)
			}
			if got, want := s.Wall(), epoch.Add(tt.wantElapsed); !got.Equal(want) {
				t.Errorf("Wall %v, want %v (the drift shows in the wall reading too)", got, want)
			}
		})
	}
}

func TestSkewedRateRefused(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		s := NewSkewed(NewFake(epoch))
		if err := s.SetRate(rate); err == nil {
			t.Errorf("SetRate(%v) accepted", rate)
		}
		if got := s.Rate(); got != 1 {
			t.Errorf("after SetRate(%v) refused, rate %v, want 1", rate, got)
		}
	}
}

// TestSkewedTimerFiresAtSkewedDeadline: a timer of d fires once the skewed
// clock advanced d, however the rate changed meanwhile.
func TestSkewedTimerFiresAtSkewedDeadline(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		// base time before the rate change and the new rate (0: none)
		before  time.Duration
		newRate float64
		// base time still needed after that
		wantBase time.Duration
	}{
		{"double speed", 2, 0, 0, 500 * time.Millisecond},
		{"half speed", 0.5, 0, 0, 2 * time.Second},
		{"sped up halfway", 1, 500 * time.Millisecond, 2, 250 * time.Millisecond},
		{"slowed down halfway", 1, 500 * time.Millisecond, 0.5, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, base := newSkewedFake(t, tt.rate)
			start := s.Now()
			tm := s.NewTimer(time.Second)
			base.Advance(tt.before)
			if tt.newRate != 0 {
				if err := s.SetRate(tt.newRate); err != nil {
					t.Fatal(err)
				}
			}
			base.Advance(tt.wantBase - time.Millisecond)
			if _, ok := received(tm.C()); ok {
				t.Fatal("fired a millisecond of base time early")
			}
			base.Advance(time.Millisecond)
			got, ok := received(tm.C())
			if !ok {
				t.Fatal("did not fire at the deadline")
			}
			if elapsed := got.Sub(start); elapsed != time.Second {
				t.Fatalf("fired reading %v after start, want 1s", elapsed)
			}
		})
	}
}

func TestSkewedTicker(t *testing.T) {
	s, base := newSkewedFake(t, 2)
	start := s.Now()
	tk := s.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		base.Advance(500 * time.Millisecond)
		got, ok := received(tk.C())
		if want := time.Duration(i) * time.Second; !ok || got.Sub(start) != want {
			t.Fatalf("tick %d: %v after start, %v; want %v", i, got.Sub(start), ok, want)
		}
	}
	if err := s.SetRate(0.5); err != nil {
		t.Fatal(err)
	}
	base.Advance(2*time.Second - time.Millisecond)
	if _, ok := received(tk.C()); ok {
		t.Fatal("ticked early at half speed")
	}
	base.Advance(time.Millisecond)
	if got, ok := received(tk.C()); !ok || got.Sub(start) != 4*time.Second {
		t.Fatalf("tick at half speed: %v, %v; want 4s", got.Sub(start), ok)
	}
	tk.Stop()
	base.Advance(time.Hour)
	if _, ok := received(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
	if n := base.Pending(); n != 0 {
		t.Fatalf("base has %d armed timers after Stop, want 0", n)
	}
}

func TestSkewedStopAndAfterFunc(t *testing.T) {
	s, base := newSkewedFake(t, 2)
	stopped := s.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Error("Stop of an armed timer reported false")
	}
	ran := false
	s.AfterFunc(time.Second, func() { ran = true })
	base.Advance(500 * time.Millisecond)
	if _, ok := received(stopped.C()); ok {
		t.Error("a stopped timer fired")
	}
	if !ran {
		t.Error("AfterFunc did not run at its skewed deadline")
	}
}

// TestSkewedJumpMovesWallOnly: a jump of an hour either way moves Wall and
// leaves elapsed time and timers alone.
func TestSkewedJumpMovesWallOnly(t *testing.T) {
	for _, jump := range []time.Duration{time.Hour, -time.Hour} {
		s, base := newSkewedFake(t, 2)
		start := s.Now()
		tm := s.NewTimer(time.Second)
		wall := s.Wall()
		s.Jump(jump)
		if got := s.Wall().Sub(wall); got != jump {
			t.Errorf("jump %v moved Wall by %v", jump, got)
		}
		if got := s.Since(start); got != 0 {
			t.Errorf("jump %v: Since %v, want 0", jump, got)
		}
		base.Advance(499 * time.Millisecond)
		if _, ok := received(tm.C()); ok {
			t.Errorf("jump %v fired a timer early", jump)
		}
		base.Advance(time.Millisecond)
		if _, ok := received(tm.C()); !ok {
			t.Errorf("jump %v: timer did not fire at its deadline", jump)
		}
	}
}

// TestSkewedTiesKeepCreationOrder: over a Fake, timers due at the same
// skewed moment fire in creation order, across rate changes too.
func TestSkewedTiesKeepCreationOrder(t *testing.T) {
	s, base := newSkewedFake(t, 1)
	var got []int
	for i := range 5 {
		s.AfterFunc(time.Second, func() { got = append(got, i) })
	}
	for _, rate := range []float64{2, 0.5, 1.5} {
		if err := s.SetRate(rate); err != nil {
			t.Fatal(err)
		}
	}
	base.Advance(time.Second)
	if want := []int{0, 1, 2, 3, 4}; !reflect.DeepEqual(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
}

func TestBaseWait(t *testing.T) {
	tests := []struct {
		name string
		left time.Duration
		rate float64
		want time.Duration
	}{
		{"double speed", time.Second, 2, 500 * time.Millisecond},
		{"half speed", time.Second, 0.5, 2 * time.Second},
		{"rounds up", 1, 3, 1},
		{"past due", -time.Second, 2, 0},
		{"longest at half speed is capped", math.MaxInt64, 0.5, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := baseWait(tt.left, tt.rate); got != tt.want {
				t.Fatalf("baseWait(%v, %v) = %v, want %v", tt.left, tt.rate, got, tt.want)
			}
		})
	}
}
