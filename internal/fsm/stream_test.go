package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/placement"
)

// inStream tags c as write seq of the stream (id, floor) of session.
func inStream(c command.Command, session, id, floor, seq uint64) command.Command {
	c.SessionID, c.StreamID, c.StreamFloor, c.StreamSeq = session, id, floor, seq
	return c
}

// TestStreamOrder checks the rules of stream.go: a stream's writes apply
// in order only; a gap, another stream at the same or a lower floor, or a
// write after its stream was superseded is refused unavailable and changes
// nothing; state refusals (a version mismatch) take their place.
func TestStreamOrder(t *testing.T) {
	const s = 1 // the session made at index 1
	type step struct {
		cmd      command.Command
		wantCode api.Code
	}
	tests := []struct {
		name  string
		steps []step
		// want is the stream position after the steps and the nodes
		// expected under /q, in order.
		want  streamPos
		nodes []string
	}{
		{
			name: "a stream applies in order",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 2)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 3)},
			},
			want: streamPos{7, 1, 3}, nodes: []string{"n-0000000002", "n-0000000003", "n-0000000004"},
		},
		{
			name: "a missing write refuses every later one",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 3), wantCode: api.CodeUnavailable},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 4), wantCode: api.CodeUnavailable},
			},
			want: streamPos{7, 1, 1}, nodes: []string{"n-0000000002"},
		},
		{
			name: "a stream whose first write is missing applies nothing",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 2), wantCode: api.CodeUnavailable},
			},
			want: streamPos{}, nodes: nil,
		},
		{
			name: "a write applied twice is refused the second time",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 1), wantCode: api.CodeUnavailable},
			},
			want: streamPos{7, 1, 1}, nodes: []string{"n-0000000002"},
		},
		{
			name: "a refusal by the state takes its place",
			steps: []step{
				{cmd: inStream(putVersion("/q/x", "v", 9), s, 7, 1, 1), wantCode: api.CodePreconditionFailed},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 2)},
			},
			want: streamPos{7, 1, 2}, nodes: []string{"n-0000000003"},
		},
		{
			name: "a newer connection supersedes, and the older one's writes are refused after",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 8, 5, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 1, 2), wantCode: api.CodeUnavailable},
				{cmd: inStream(putSequential("/q/n-"), s, 8, 5, 2)},
			},
			want: streamPos{8, 5, 2}, nodes: []string{"n-0000000002", "n-0000000003", "n-0000000004"},
		},
		{
			name: "an older connection's first write after a newer one's stream is refused",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 8, 5, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 4, 1), wantCode: api.CodeUnavailable},
			},
			want: streamPos{8, 5, 1}, nodes: []string{"n-0000000002"},
		},
		{
			name: "two connections with one floor: the second is refused, its later writes too",
			steps: []step{
				{cmd: inStream(putSequential("/q/n-"), s, 7, 5, 1)},
				{cmd: inStream(putSequential("/q/n-"), s, 8, 5, 1), wantCode: api.CodeUnavailable},
				{cmd: inStream(putSequential("/q/n-"), s, 8, 5, 2), wantCode: api.CodeUnavailable},
				{cmd: inStream(putSequential("/q/n-"), s, 7, 5, 2)},
			},
			want: streamPos{7, 5, 2}, nodes: []string{"n-0000000002", "n-0000000003"},
		},
		{
			name: "transactions and deletes are ordered too",
			steps: []step{
				{cmd: inStream(command.Command{Op: command.OpTxn, Ops: []command.TxnOp{{Kind: command.TxnCreate, Path: "/q/t"}}}, s, 7, 1, 1)},
				{cmd: inStream(del("/q/t"), s, 7, 1, 3), wantCode: api.CodeUnavailable},
				{cmd: inStream(del("/q/t"), s, 7, 1, 2)},
			},
			want: streamPos{7, 1, 2}, nodes: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustApply(createSession(10_000))
			for i, st := range tt.steps {
				twin := h.f.Clone()
				r, events := h.apply(st.cmd)
				if got := codeOf(r.Err); got != st.wantCode {
					t.Fatalf("step %d: code %q (%v), want %q", i, got, r.Err, st.wantCode)
				}
				if st.wantCode == api.CodeUnavailable {
					skip := noop()
					twin.Apply(h.index, &skip)
					if len(events) != 0 || h.f.Hash() != twin.Hash() {
						t.Errorf("step %d: the refusal changed the state (events %v)", i, events)
					}
				}
			}
			if id, floor, seq := h.f.StreamPosition(s); (streamPos{id, floor, seq}) != tt.want {
				t.Errorf("position %d/%d/%d, want %+v", id, floor, seq, tt.want)
			}
			names, err := h.f.Children("/q")
			if err != nil && len(tt.nodes) > 0 {
				t.Fatalf("children of /q: %v", err)
			}
			if fmt.Sprint(names) != fmt.Sprint(tt.nodes) {
				t.Errorf("nodes %v, want %v", names, tt.nodes)
			}
			if err := checkInvariants(h.f); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestStreamStateLifetime checks that a stream position goes with its
// session, survives a snapshot (written in the stream versions only while a
// session holds one) and a clone, and that a snapshot claiming positions
// it lacks is refused.
func TestStreamStateLifetime(t *testing.T) {
	h := newHarness(t)
	h.mustApply(createSession(10_000))
	const s = 1
	if v := snapshotBytes(t, h.f)[len(snapshotMagic)]; v >= snapshotVersion+snapshotStreamsRaise {
		t.Fatalf("a state without streams is written in version %d", v)
	}
	h.mustApply(inStream(put("/a", "1"), s, 7, 1, 1))
	data := snapshotBytes(t, h.f)
	if v := data[len(snapshotMagic)]; v < snapshotVersion+snapshotStreamsRaise {
		t.Fatalf("a state with a stream is written in version %d", v)
	}
	back := restore(t, data)
	if id, floor, seq := back.StreamPosition(s); id != 7 || floor != 1 || seq != 1 {
		t.Fatalf("position read back %d/%d/%d, want 7/1/1", id, floor, seq)
	}
	if back.Hash() != h.f.Hash() {
		t.Fatal("the state read back differs")
	}
	// The restored state goes on with the stream, and refuses a gap.
	next := inStream(put("/a", "2"), s, 7, 1, 2)
	if r, _ := back.Apply(h.index+1, &next); r.Err != nil {
		t.Fatalf("next write after restore: %v", r.Err)
	}
	// A snapshot in a stream version whose sessions hold none is corrupt.
	plain := newHarness(t)
	plain.mustApply(createSession(10_000))
	bad := snapshotBytes(t, plain.f)
	bad[len(snapshotMagic)] += snapshotStreamsRaise
	if _, err := ReadSnapshot(bytesReader(bad)); err == nil {
		t.Fatal("a stream version without positions was read")
	}
	// The position goes with the session.
	h.mustApply(closeSession(s))
	if id, _, _ := h.f.StreamPosition(s); id != 0 {
		t.Fatal("the stream position outlived its session")
	}
	if v := snapshotBytes(t, h.f)[len(snapshotMagic)]; v >= snapshotVersion+snapshotStreamsRaise {
		t.Fatalf("a state whose sessions ended is written in version %d", v)
	}
}

// TestStreamInShard checks a stream outside shard 0: the session's local
// record holds the position while the session lives (it is not idle), and
// the session's end in the shard drops it.
func TestStreamInShard(t *testing.T) {
	var f *FSM
	for n := 2; f == nil && n <= 16; n++ { // a cluster whose root's children live outside shard 0
		m, err := placement.New(n)
		if err != nil {
			t.Fatal(err)
		}
		if k := m.ChildShard("/"); k != 0 {
			if f, err = NewShard(k, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if f == nil {
		t.Fatal("no shard count up to 16 places the root's children outside shard 0")
	}
	const s = 99
	var path string
	for i := 0; path == ""; i++ { // a directory whose children live with it
		if d := fmt.Sprintf("/l%d", i); f.holdsChildrenOf(d) {
			path = d + "/x"
		}
	}
	mk := put(api.Parent(path), "")
	if r, _ := f.Apply(1, &mk); r.Err != nil {
		t.Fatal(r.Err)
	}
	w := inStream(put(path, "v"), s, 7, 1, 1)
	w.Observed = 1
	if r, _ := f.Apply(2, &w); r.Err != nil {
		t.Fatal(r.Err)
	}
	if id, _, seq := f.StreamPosition(s); id != 7 || seq != 1 {
		t.Fatalf("position %d/%d, want 7/1", id, seq)
	}
	gap := inStream(put(path, "w"), s, 7, 1, 3)
	gap.Observed = 2
	if r, _ := f.Apply(3, &gap); codeOf(r.Err) != api.CodeUnavailable {
		t.Fatalf("a gap in a shard: %v, want unavailable", r.Err)
	}
	ended := command.Command{Op: command.OpSessionsEnded, Sessions: []uint64{s}}
	if r, _ := f.Apply(4, &ended); r.Err != nil {
		t.Fatal(r.Err)
	}
	if id, _, _ := f.StreamPosition(s); id != 0 {
		t.Fatal("the stream position outlived the session's end in its shard")
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
