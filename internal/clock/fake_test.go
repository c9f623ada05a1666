package clock

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// received returns what ch holds now, without waiting: a Fake delivers
// within Advance.
func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeFiresInDeadlineOrder(t *testing.T) {
	tests := []struct {
		name    string
		delays  []time.Duration // one AfterFunc per delay, named by index
		advance []time.Duration
		want    []int
	}{
		{"in order", []time.Duration{1, 2, 3}, []time.Duration{3}, []int{0, 1, 2}},
		{"reversed", []time.Duration{3, 2, 1}, []time.Duration{3}, []int{2, 1, 0}},
		{"ties by creation", []time.Duration{2, 1, 2, 1}, []time.Duration{2}, []int{1, 3, 0, 2}},
		{"only the due ones", []time.Duration{1, 5, 2}, []time.Duration{2}, []int{0, 2}},
		{"in steps", []time.Duration{4, 1, 3}, []time.Duration{1, 1, 1, 1}, []int{1, 2, 0}},
		{"zero delay on Advance(0)", []time.Duration{0, 1}, []time.Duration{0}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(epoch)
			var got []int
			for i, d := range tt.delays {
				f.AfterFunc(d*time.Second, func() {
					if now, want := f.Now(), epoch.Add(max(d, 0)*time.Second); !now.Equal(want) {
						t.Errorf("timer %d ran at %v, want its deadline %v", i, now, want)
					}
					got = append(got, i)
				})
			}
			for _, d := range tt.advance {
				f.Advance(d * time.Second)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fired %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFakeTimer(t *testing.T) {
	tests := []struct {
		name      string
		run       func(f *Fake, tm Timer)
		wantFired bool
		wantAt    time.Duration // reading received, from epoch
	}{
		{"fires at the deadline", func(f *Fake, _ Timer) { f.Advance(time.Second) }, true, time.Second},
		{"reading is the deadline, not the advance", func(f *Fake, _ Timer) { f.Advance(time.Hour) }, true, time.Second},
		{"not before the deadline", func(f *Fake, _ Timer) { f.Advance(time.Second - 1) }, false, 0},
		{"stopped", func(f *Fake, tm Timer) { tm.Stop(); f.Advance(time.Hour) }, false, 0},
		{"stopped after firing leaves nothing stale", func(f *Fake, tm Timer) { f.Advance(time.Second); tm.Stop() }, false, 0},
		{"reset later", func(f *Fake, tm Timer) { tm.Reset(2 * time.Second); f.Advance(time.Second); f.Advance(time.Second) }, true, 2 * time.Second},
		{"reset after firing", func(f *Fake, tm Timer) { f.Advance(time.Second); tm.Reset(time.Second); f.Advance(time.Second) }, true, 2 * time.Second},
		{"reset to zero", func(f *Fake, tm Timer) { f.Advance(time.Second / 2); tm.Reset(0) }, true, time.Second / 2},
		{"jump moves no timer", func(f *Fake, _ Timer) { f.Jump(time.Hour) }, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(epoch)
			tm := f.NewTimer(time.Second)
			tt.run(f, tm)
			got, fired := received(tm.C())
			if fired != tt.wantFired {
				t.Fatalf("fired %v, want %v", fired, tt.wantFired)
			}
			if want := epoch.Add(tt.wantAt); fired && !got.Equal(want) {
				t.Fatalf("received %v, want %v", got, want)
			}
		})
	}
}

func TestFakeTimerStopAndResetReport(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Error("Stop of an armed timer reported false")
	}
	if tm.Stop() {
		t.Error("second Stop reported true")
	}
	if tm.Reset(time.Second) {
		t.Error("Reset of a stopped timer reported it active")
	}
	if !tm.Reset(time.Second) {
		t.Error("Reset of an armed timer reported it inactive")
	}
	if n := f.Pending(); n != 1 {
		t.Errorf("Pending %d after Reset of one timer, want 1", n)
	}
}

func TestFakeNewTimerZeroIsDueAtOnce(t *testing.T) {
	f := NewFake(epoch)
	if got, ok := received(f.NewTimer(0).C()); !ok || !got.Equal(epoch) {
		t.Fatalf("NewTimer(0) delivered %v, %v; want %v at once", got, ok, epoch)
	}
	if got, ok := received(f.After(-time.Second)); !ok || !got.Equal(epoch) {
		t.Fatalf("After(-1s) delivered %v, %v; want %v at once", got, ok, epoch)
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(epoch)
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		got, ok := received(tk.C())
		if want := epoch.Add(time.Duration(i) * time.Second); !ok || !got.Equal(want) {
			t.Fatalf("tick %d: %v, %v; want %v", i, got, ok, want)
		}
	}
	// A slow receiver gets the first tick it missed; the others are dropped.
	f.Advance(5 * time.Second)
	if got, ok := received(tk.C()); !ok || !got.Equal(epoch.Add(4*time.Second)) {
		t.Fatalf("after 5 missed ticks: %v, %v; want the first, at 4s", got, ok)
	}
	if _, ok := received(tk.C()); ok {
		t.Fatal("a second tick was buffered")
	}
	tk.Reset(3 * time.Second)
	f.Advance(2 * time.Second)
	if _, ok := received(tk.C()); ok {
		t.Fatal("ticked before the new period")
	}
	f.Advance(time.Second)
	if got, ok := received(tk.C()); !ok || !got.Equal(epoch.Add(11*time.Second)) {
		t.Fatalf("after Reset(3s): %v, %v; want 11s", got, ok)
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := received(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("Pending %d after Stop, want 0", n)
	}
}

func TestFakeTickerNonPositivePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewTicker(0) did not panic")
		}
	}()
	NewFake(epoch).NewTicker(0)
}

func TestFakeAdvanceBackwardsPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	NewFake(epoch).Advance(-1)
}

// TestFakeTimerArmedWhileFiring: a timer armed by an AfterFunc and due
// within the same Advance fires in that Advance, at its own deadline.
func TestFakeTimerArmedWhileFiring(t *testing.T) {
	f := NewFake(epoch)
	var at []time.Time
	f.AfterFunc(time.Second, func() {
		at = append(at, f.Now())
		f.AfterFunc(time.Second, func() { at = append(at, f.Now()) })
	})
	f.Advance(5 * time.Second)
	want := []time.Time{epoch.Add(time.Second), epoch.Add(2 * time.Second)}
	if !reflect.DeepEqual(at, want) {
		t.Fatalf("ran at %v, want %v", at, want)
	}
	if now := f.Now(); !now.Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("Now %v after Advance(5s), want 5s", now)
	}
}

// TestFakeJumpMovesWallOnly: a jump moves Wall and nothing that measures
// elapsed time.
func TestFakeJumpMovesWallOnly(t *testing.T) {
	tests := []struct {
		name string
		jump time.Duration
	}{
		{"forward an hour", time.Hour},
		{"back an hour", -time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(epoch)
			start := f.Now()
			deadline := start.Add(time.Minute)
			f.Advance(time.Second)
			f.Jump(tt.jump)
			if got := f.Since(start); got != time.Second {
				t.Errorf("Since %v, want 1s", got)
			}
			if got := f.Until(deadline); got != time.Minute-time.Second {
				t.Errorf("Until %v, want 59s", got)
			}
			if got, want := f.Wall(), epoch.Add(time.Second+tt.jump); !got.Equal(want) {
				t.Errorf("Wall %v, want %v", got, want)
			}
			if got := f.Now(); !got.Equal(epoch.Add(time.Second)) {
				t.Errorf("Now %v, want 1s after the epoch", got)
			}
		})
	}
}

func TestFakeBlockUntil(t *testing.T) {
	f := NewFake(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	armed := make(chan Timer)
	go func() {
		a, b := f.NewTimer(time.Second), f.NewTimer(time.Second)
		b.Stop()
		armed <- a
	}()
	// Two armed at some point is not enough if one was stopped: wait for
	// one, and check that a wait for two more times out.
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tm := <-armed
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := f.BlockUntil(done, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntil(2) with one armed and a cancelled context: %v, want context.Canceled", err)
	}
	f.Advance(time.Second)
	if _, ok := received(tm.C()); !ok {
		t.Fatal("the armed timer did not fire")
	}
	if err := f.BlockUntil(ctx, 0); err != nil {
		t.Fatalf("BlockUntil(0): %v", err)
	}
}
