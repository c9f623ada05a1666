package fsm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

func TestExactlyOnce(t *testing.T) {
	const s = 1 // the session made at index 1
	tests := []struct {
		name string
		// steps after the session's creation; each is a command and whether
		// it must be answered from the window (no events, no change).
		steps []dedupStep
	}{
		{
			name: "a retry returns the first result and applies nothing",
			steps: []dedupStep{
				{cmd: withSeq(putSequential("/q/l-"), s, 1), wantPath: "/q/l-0000000002"},
				{cmd: withSeq(putSequential("/q/l-"), s, 1), wantPath: "/q/l-0000000002", duplicate: true},
				{cmd: withSeq(putSequential("/q/l-"), s, 2), wantPath: "/q/l-0000000003"},
			},
		},
		{
			name: "a retry of a refusal is refused again even when it would now succeed",
			steps: []dedupStep{
				{cmd: withSeq(putVersion("/a", "x", 1), s, 1), wantCode: api.CodePreconditionFailed},
				{cmd: withSeq(put("/a", "x"), s, 2), wantPath: "/a"},
				{cmd: withSeq(putVersion("/a", "x", 1), s, 1), wantCode: api.CodePreconditionFailed, duplicate: true},
			},
		},
		{
			name: "requests applied out of order inside the window",
			steps: []dedupStep{
				{cmd: withSeq(put("/c", ""), s, 3), wantPath: "/c"},
				{cmd: withSeq(put("/b", ""), s, 2), wantPath: "/b"},
				{cmd: withSeq(put("/b", ""), s, 2), wantPath: "/b", duplicate: true},
				{cmd: withSeq(put("/c", ""), s, 3), wantPath: "/c", duplicate: true},
				{cmd: withSeq(put("/a", ""), s, 1), wantPath: "/a"},
			},
		},
		{
			name: "a delete is deduplicated",
			steps: []dedupStep{
				{cmd: put("/d", "")},
				{cmd: withSeq(del("/d"), s, 5), wantPath: "/d"},
				{cmd: withSeq(del("/d"), s, 5), wantPath: "/d", duplicate: true},
			},
		},
		{
			name: "request_seq 0 is not deduplicated",
			steps: []dedupStep{
				{cmd: withSeq(putSequential("/q/l-"), s, 0), wantPath: "/q/l-0000000002"},
				{cmd: withSeq(putSequential("/q/l-"), s, 0), wantPath: "/q/l-0000000003"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustApply(createSession(1000))
			for i, step := range tt.steps {
				step.run(t, h, i)
			}
		})
	}
}

type dedupStep struct {
	cmd       command.Command
	wantCode  api.Code
	wantPath  string // the result's node path, if set
	duplicate bool
}

func (step dedupStep) run(t *testing.T, h *harness, i int) {
	t.Helper()
	before := h.f.Clone()
	result, events := h.apply(step.cmd)
	if got := codeOf(result.Err); got != step.wantCode {
		t.Fatalf("step %d: code %q (%v), want %q", i, got, result.Err, step.wantCode)
	}
	if step.wantPath != "" && result.Node.Path != step.wantPath {
		t.Errorf("step %d: path %q, want %q", i, result.Node.Path, step.wantPath)
	}
	if step.duplicate {
		checkRefusal(t, before, h, events)
	}
}

func TestExactlyOnceWindow(t *testing.T) {
	h := newHarness(t)
	h.mustApply(createSession(1000))
	first := make(map[uint64]Result)
	last := uint64(DedupWindow + 2)
	for seq := uint64(1); seq <= last; seq++ {
		first[seq] = h.mustApply(withSeq(putSequential("/q/l-"), 1, seq))
	}
	floor := last - DedupWindow + 1
	for _, seq := range []uint64{1, floor - 1} {
		r, _ := h.apply(withSeq(putSequential("/q/l-"), 1, seq))
		if codeOf(r.Err) != api.CodeInvalidArgument || !strings.Contains(r.Err.Error(), "request_seq too old") {
			t.Errorf("seq %d below the window: %v, want invalid_argument request_seq too old", seq, r.Err)
		}
	}
	for _, seq := range []uint64{floor, last} {
		r, events := h.apply(withSeq(putSequential("/q/l-"), 1, seq))
		if !reflect.DeepEqual(r, first[seq]) || len(events) != 0 {
			t.Errorf("seq %d in the window: %+v %v, want the first result %+v and no events", seq, r, events, first[seq])
		}
	}
	s, _ := h.f.sessions.Get(session{id: 1})
	if n := len(s.dedup.records); n != DedupWindow {
		t.Errorf("the window holds %d results, want %d", n, DedupWindow)
	}
}

// TestExactlyOnceSurvivesSnapshotAndClone checks that results (errors
// included) are in snapshots and that a clone's window is isolated.
func TestExactlyOnceSurvivesSnapshotAndClone(t *testing.T) {
	h := newHarness(t)
	h.mustApply(createSession(1000))
	created := h.mustApply(withSeq(putSequential("/q/l-"), 1, 1))
	refused, _ := h.apply(withSeq(putVersion("/a", "", 9), 1, 2))
	clone := h.f.Clone()
	h.mustApply(withSeq(putSequential("/q/l-"), 1, 3))

	restored := restore(t, snapshotBytes(t, h.f))
	retries := []struct {
		name string
		seq  uint64
		want Result
	}{
		{"success", 1, created},
		{"refusal", 2, refused},
	}
	for _, target := range []struct {
		name string
		f    *FSM
	}{{"restored", restored}, {"clone", clone}} {
		for _, retry := range retries {
			t.Run(target.name+"/"+retry.name, func(t *testing.T) {
				got, events := target.f.Apply(h.index+1, ptr(withSeq(putSequential("/q/l-"), 1, retry.seq)))
				if !reflect.DeepEqual(got, retry.want) || len(events) != 0 {
					t.Errorf("retry of seq %d: %+v %v, want %+v", retry.seq, got, events, retry.want)
				}
				target.f.applied-- // let the next retry use the same index
			})
		}
	}
	if _, err := clone.Get("/q/l-0000000003"); err == nil {
		t.Errorf("the clone sees a write made after it")
	}
	if r, _ := clone.Apply(h.index+1, ptr(withSeq(putSequential("/q/l-"), 1, 3))); r.Node.Path != "/q/l-0000000003" {
		t.Errorf("the clone's window holds seq 3 applied to the original: %+v", r)
	}
}

func ptr(c command.Command) *command.Command { return &c }
