package timeline

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"
)

// us builds events from (microseconds, stage) pairs.
func us(pairs ...any) []Event {
	var events []Event
	for i := 0; i < len(pairs); i += 2 {
		events = append(events, Event{At: int64(pairs[i].(int)) * 1000, Stage: pairs[i+1].(Stage)})
	}
	return events
}

func TestBreakdownLinesFollowersUpWithTheLeader(t *testing.T) {
	// Two writes, 2 ms apart; the follower also reads a heartbeat frame
	// before the MsgApp and sends its previous ack before the save.
	leader := us(
		0, Propose, 10, ReadyTaken, 12, Sent, 100, WriterTook, 140, WriterFlushed, 15, SaveStart,
		500, AckStepped, // an ack of an earlier write: before any follower saved
		700, SaveEnd, 1000, AckStepped, 1050, ApplyStart, 1060, ApplyEnd, 1070, Answered,
		2000, Propose, 2020, ReadyTaken, 2022, Sent, 2025, SaveStart, 2500, SaveEnd, 2900, AckStepped,
		2950, ApplyStart, 2960, ApplyEnd, 2980, Answered,
		4000, Propose,
	)
	follower := us(
		50, FrameRead, 150, WriterTook, // the earlier write's ack going out
		200, FrameRead, 210, AppendStepped, 240, ReadyTaken, 241, AppendQueued, 250, SaveStart, 900, SaveEnd,
		903, WriterTook, 920, WriterFlushed,
		2200, FrameRead, 2215, AppendStepped, 2230, ReadyTaken, 2231, AppendQueued, 2240, SaveStart, 2800, SaveEnd,
		2803, WriterTook, 2820, WriterFlushed,
	)
	steps := Breakdown(sortedCopy(leader), [][]Event{follower})
	got := map[string]Step{}
	for _, s := range steps {
		got[s.Member+"/"+s.Stage.String()] = s
	}
	want := map[string][2]time.Duration{ // p50 over {write 1, write 2} is the larger (index 1 of 2)
		"leader/" + Sent.String():             {12 * time.Microsecond, 22 * time.Microsecond},
		"follower 1/" + FrameRead.String():    {200 * time.Microsecond, 200 * time.Microsecond},
		"follower 1/" + SaveEnd.String():      {900 * time.Microsecond, 800 * time.Microsecond},
		"follower 1/" + WriterTook.String():   {903 * time.Microsecond, 803 * time.Microsecond},
		"leader/" + AckStepped.String():       {1000 * time.Microsecond, 900 * time.Microsecond},
		"leader/" + Answered.String():         {1070 * time.Microsecond, 980 * time.Microsecond},
		"leader/" + WriterFlushed.String():    {140 * time.Microsecond, 140 * time.Microsecond},
		"follower 1/" + AppendQueued.String(): {241 * time.Microsecond, 231 * time.Microsecond},
	}
	for name, w := range want {
		s, ok := got[name]
		if !ok {
			t.Errorf("no step %q in %v", name, steps)
			continue
		}
		if p50 := max(w[0], w[1]); s.P50 != p50 {
			t.Errorf("%s: p50 %v, want %v", name, s.P50, p50)
		}
	}
	if s := got["leader/"+WriterFlushed.String()]; s.Writes != 1 {
		t.Errorf("the leader's writer was seen in %d writes, want 1 (the second write has no writer marks)", s.Writes)
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].P50 < steps[i-1].P50 {
			t.Fatalf("steps not in order of p50: %v", steps)
		}
	}
}

func TestBreakdownSkipsWritesWithoutTheirStages(t *testing.T) {
	// The first proposal's stages never came before the next proposal (it
	// was dropped): it is skipped, and the second is measured from its own
	// Propose.
	leader := us(0, Propose, 5, Propose, 10, ReadyTaken, 12, Sent, 15, SaveStart, 700, SaveEnd,
		1050, ApplyStart, 1060, ApplyEnd, 1070, Answered, 3000, Propose)
	steps := Breakdown(leader, nil)
	if len(steps) == 0 {
		t.Fatal("no steps")
	}
	for _, s := range steps {
		if s.Writes != 1 {
			t.Fatalf("%s counted in %d writes, want 1: %v", s.Stage, s.Writes, steps)
		}
	}
	if steps[0].Stage != ReadyTaken || steps[0].P50 != 5*time.Microsecond {
		t.Fatalf("first step %+v, want the Ready 5µs after the second proposal", steps[0])
	}
}

func TestParse(t *testing.T) {
	events, err := Parse(strings.NewReader("100 P\n250 R\n"), "n1")
	if err != nil || len(events) != 2 || events[1] != (Event{At: 250, Stage: ReadyTaken}) {
		t.Fatalf("Parse = %v, %v", events, err)
	}
	_, err = Parse(strings.NewReader("100 P\nnonsense\n"), "n1")
	if err == nil || !strings.Contains(err.Error(), "n1 line 2") {
		t.Fatalf("a bad line gave %v, want an error naming n1 line 2", err)
	}
}

func sortedCopy(events []Event) []Event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return out
}

// TestBreakdownPlacesTheClientPortAroundTheWrite: the request's read is
// the last RequestRead before its proposal (an earlier one was a ping's),
// and its reply the first ReplyFlushed after the proposer's answer (one
// before it was a ping's reply).
func TestBreakdownPlacesTheClientPortAroundTheWrite(t *testing.T) {
	write := func(at int) []any {
		return []any{at, Propose, at + 10, ReadyTaken, at + 12, Sent, at + 15, SaveStart, at + 500, SaveEnd,
			at + 900, AckStepped, at + 950, ApplyStart, at + 960, ApplyEnd, at + 980, Answered}
	}
	var marks []any
	marks = append(marks, -500, RequestRead, -80, RequestRead)
	marks = append(marks, write(0)...)
	marks = append(marks, 500, ReplyFlushed, 1100, ReplyFlushed, 1900, RequestRead)
	marks = append(marks, write(2000)...)
	marks = append(marks, 3030, ReplyFlushed, 3950, RequestRead, 4000, Propose)
	follower := us(210, AppendStepped, 2210, AppendStepped)
	got := map[Stage]Step{}
	for _, s := range Breakdown(sortedCopy(us(marks...)), [][]Event{follower}) {
		if s.Member == "leader" {
			got[s.Stage] = s
		}
	}
	// p50 of two is the larger.
	if s := got[RequestRead]; s.Writes != 2 || s.P50 != -80*time.Microsecond {
		t.Errorf("request read: %+v, want 2 writes, p50 -80µs (the reads at -80 and -100 µs)", s)
	}
	if s := got[ReplyFlushed]; s.Writes != 2 || s.P50 != 1100*time.Microsecond {
		t.Errorf("reply written: %+v, want 2 writes, p50 1100µs (at 1100 and 1030 µs)", s)
	}
}
