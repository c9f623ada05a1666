package replica

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

type ctxKey struct{}

func TestDeadlineWithoutDone(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	d := newDeadline(parent, time.Hour)
	defer d.stop()
	if err := d.Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	if d.made() != nil {
		t.Fatal("Err made the context; only Done may")
	}
	if got := d.Value(ctxKey{}); got != "v" {
		t.Fatalf("Value = %v, want the parent's", got)
	}
	at, ok := d.Deadline()
	if !ok || time.Until(at) < 59*time.Minute {
		t.Fatalf("Deadline = %v, %v", at, ok)
	}
}

// waitDone fails t unless d's Done closes within ten seconds.
func waitDone(t *testing.T, d *deadline, when string) {
	t.Helper()
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done not closed %s", when)
	}
}

func TestDeadlinePasses(t *testing.T) {
	d := newDeadline(context.Background(), 20*time.Millisecond)
	defer d.stop()
	waitDone(t, d, "long after the deadline")
	if err := d.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want deadline exceeded", err)
	}
	if d.remaining() != 0 {
		t.Fatalf("remaining = %v after the deadline", d.remaining())
	}
}

func TestDeadlinePassedBeforeDone(t *testing.T) {
	d := newDeadline(context.Background(), time.Millisecond)
	defer d.stop()
	deadline := time.Now().Add(10 * time.Second)
	for d.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Err still nil long after the deadline")
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(d.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v", d.Err())
	}
	waitDone(t, d, "when made after the deadline")
}

func TestDeadlineFollowsParent(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	d := newDeadline(parent, time.Hour)
	defer d.stop()
	cancel()
	if err := d.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err before Done = %v, want canceled", err)
	}
	waitDone(t, d, "with the parent's")
	if err := d.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after Done = %v, want canceled", err)
	}
}

func TestDeadlineStopReleases(t *testing.T) {
	d := newDeadline(context.Background(), time.Hour)
	done := d.Done()
	d.stop()
	select {
	case <-done:
	default:
		t.Fatal("stop did not release the context Done made")
	}
}

// TestStopTimer: a timer that fired unreceived (a proposal whose apply
// won its select as the timer fired) leaves no fire behind once stopped, so
// the next wait that takes it from the pool does not end at once. Under Go's
// old timers (GODEBUG=asynctimerchan=1) such a fire waits in the channel
// after Stop; TestStopTimerOldTimers runs this test again under them.
func TestStopTimer(t *testing.T) {
	oldTimers := strings.Contains(os.Getenv("GODEBUG"), "asynctimerchan=1")
	tm := time.NewTimer(time.Millisecond)
	due := time.Now().Add(time.Millisecond)
	// Let it fire, unreceived: under the old timers the fire shows in the
	// channel's length; under the new ones nothing shows, and once its
	// time is past the fire is due.
	for deadline := time.Now().Add(10 * time.Second); len(tm.C) == 0; time.Sleep(time.Millisecond) {
		if !oldTimers && time.Now().After(due.Add(5*time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old timer's fire never reached its channel")
		}
	}
	stopTimer(tm)
	tm.Reset(time.Hour)
	defer tm.Stop()
	select {
	case <-tm.C:
		t.Fatal("a stopped timer kept a stale fire: reset for an hour, it fired at once")
	case <-time.After(20 * time.Millisecond):
	}
}

// TestStopTimerOldTimers runs TestStopTimer in a test process of its own
// under Go's old timers, where a stale fire is real.
func TestStopTimerOldTimers(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "asynctimerchan=1") {
		t.Skip("this process runs under the old timers already: TestStopTimer is the test")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopTimer$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestStopTimer") {
		t.Fatalf("TestStopTimer under GODEBUG=asynctimerchan=1: %v\n%s", err, out)
	}
}

func TestTurnWaitBounded(t *testing.T) {
	s := NewStream(1, 2, 0)
	first := s.Next()
	second := s.Next()

	d := newDeadline(context.Background(), 20*time.Millisecond)
	if err := second.wait(d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait behind a turn that never ends = %v, want deadline exceeded", err)
	}
	if d.made() != nil {
		t.Fatal("wait made the deadline's context")
	}
	d.stop()

	parent, cancel := context.WithCancel(context.Background())
	d = newDeadline(parent, time.Hour)
	cancel()
	if err := second.wait(d); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait under a cancelled parent = %v, want canceled", err)
	}
	d.stop()

	d = newDeadline(context.Background(), time.Hour)
	defer d.stop()
	go first.End()
	if err := second.wait(d); err != nil {
		t.Fatalf("wait behind a turn that ends = %v", err)
	}
}

func TestWaiterChannelRecycled(t *testing.T) {
	w := newWaiterTable()
	id, ch := w.add()
	w.resolve(outcome{id: id, index: 7})
	if o := <-ch; o.id != id || o.index != 7 {
		t.Fatalf("outcome %+v", o)
	}
	w.remove(id)
	w.recycle(ch)
	id2, ch2 := w.add()
	defer w.remove(id2)
	select {
	case o := <-ch2:
		t.Fatalf("a recycled channel holds a stale outcome %+v", o)
	default:
	}
	w.resolve(outcome{id: id, index: 8}) // the old id is no longer waiting
	select {
	case o := <-ch2:
		t.Fatalf("an outcome for another id reached the channel: %+v", o)
	default:
	}
	w.resolve(outcome{id: id2, index: 9})
	if o := <-ch2; o.id != id2 || o.index != 9 {
		t.Fatalf("outcome %+v", o)
	}
}
