package linearize

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op builds a completed operation; ret < 0 means an unknown outcome.
func op(client int, in Input, out Output, call, ret int64) porcupine.Operation {
	if ret < 0 {
		out.Unknown = true
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func get(key string) Input        { return Input{Kind: Get, Key: key} }
func put(key, value string) Input { return Input{Kind: Put, Key: key, Value: value} }
func cas(key string, expect uint64, value string) Input {
	return Input{Kind: CAS, Key: key, Expect: expect, Value: value}
}
func read(value string, version uint64) Output {
	return Output{Found: true, Value: value, Version: version}
}
func wrote(version uint64) Output { return Output{Version: version} }

var (
	absent  = Output{}
	refused = Output{Refused: true}
	unknown = Output{Unknown: true}
)

func TestModelHistories(t *testing.T) {
	tests := []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"empty history", nil, porcupine.Ok},
		{"read of a missing key", []porcupine.Operation{op(0, get("x"), absent, 0, 1)}, porcupine.Ok},
		{"read of a key never written", []porcupine.Operation{op(0, get("x"), read("a", 1), 0, 1)}, porcupine.Illegal},
		{"put then read", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, get("x"), read("a", 1), 2, 3),
		}, porcupine.Ok},
		{"stale read after a newer write returned", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 3),
			op(1, get("x"), read("a", 1), 4, 5),
		}, porcupine.Illegal},
		{"read absent after a write returned", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, get("x"), absent, 2, 3),
		}, porcupine.Illegal},
		{"read concurrent with a write sees the old value", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 6),
			op(1, get("x"), read("a", 1), 3, 4),
		}, porcupine.Ok},
		{"read concurrent with a write sees the new value", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 6),
			op(1, get("x"), read("b", 2), 3, 4),
		}, porcupine.Ok},
		{"new value then old value in real-time order", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 10),
			op(1, get("x"), read("b", 2), 3, 4),
			op(2, get("x"), read("a", 1), 5, 6),
		}, porcupine.Illegal},
		{"read with the right value but wrong version", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, get("x"), read("a", 2), 2, 3),
		}, porcupine.Illegal},
		{"put answering a wrong version", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(3), 2, 3),
		}, porcupine.Illegal},
		{"unknown put observed later", []porcupine.Operation{
			op(0, put("x", "a"), unknown, 0, -1),
			op(1, get("x"), read("a", 1), 5, 6),
		}, porcupine.Ok},
		{"unknown put never observed", []porcupine.Operation{
			op(0, put("x", "a"), unknown, 0, -1),
			op(1, get("x"), absent, 5, 6),
			op(1, put("x", "b"), wrote(1), 7, 8),
			op(1, get("x"), read("b", 1), 9, 10),
		}, porcupine.Ok},
		{"unknown put observed before it was called", []porcupine.Operation{
			op(1, get("x"), read("a", 1), 0, 1),
			op(0, put("x", "a"), unknown, 2, -1),
		}, porcupine.Illegal},
		{"unknown put takes effect between two reads", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(2, get("x"), read("a", 1), 3, 4),
			op(2, get("x"), read("b", 2), 5, 6),
			op(2, get("x"), read("b", 2), 7, 8),
		}, porcupine.Ok},
		{"unknown put cannot be undone", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(2, get("x"), read("b", 2), 3, 4),
			op(2, get("x"), read("a", 1), 5, 6),
		}, porcupine.Illegal},
		{"CAS create on a missing key", []porcupine.Operation{
			op(0, cas("x", 0, "a"), wrote(1), 0, 1),
			op(1, get("x"), read("a", 1), 2, 3),
		}, porcupine.Ok},
		{"two sequential creates both succeed", []porcupine.Operation{
			op(0, cas("x", 0, "a"), wrote(1), 0, 1),
			op(1, cas("x", 0, "b"), wrote(2), 2, 3),
		}, porcupine.Illegal},
		{"two concurrent creates, one refused", []porcupine.Operation{
			op(0, cas("x", 0, "a"), wrote(1), 0, 5),
			op(1, cas("x", 0, "b"), refused, 1, 4),
		}, porcupine.Ok},
		{"CAS at the current version", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, cas("x", 1, "b"), wrote(2), 2, 3),
			op(1, get("x"), read("b", 2), 4, 5),
		}, porcupine.Ok},
		{"CAS succeeding at a stale version", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 3),
			op(1, cas("x", 1, "c"), wrote(3), 4, 5),
		}, porcupine.Illegal},
		{"CAS refused although its version was current", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, cas("x", 1, "b"), refused, 2, 3),
		}, porcupine.Illegal},
		{"unknown CAS whose precondition failed stays invisible", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(0, put("x", "b"), wrote(2), 2, 3),
			op(1, cas("x", 1, "c"), unknown, 4, -1),
			op(2, get("x"), read("c", 3), 5, 6),
		}, porcupine.Illegal},
		{"unknown CAS observed", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, cas("x", 1, "c"), unknown, 4, -1),
			op(2, get("x"), read("c", 2), 5, 6),
		}, porcupine.Ok},
		{"keys are independent registers", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("y", "b"), wrote(1), 0, 1),
			op(2, get("x"), read("a", 1), 2, 3),
			op(2, get("y"), read("b", 1), 2, 3),
		}, porcupine.Ok},
		{"a stale read on one key among good keys", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("y", "b"), wrote(1), 0, 1),
			op(1, put("y", "c"), wrote(2), 2, 3),
			op(2, get("x"), read("a", 1), 4, 5),
			op(2, get("y"), read("b", 1), 4, 5),
		}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := CheckOperations(tt.history, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tt.want {
				t.Fatalf("got %s, want %s", res.Outcome, tt.want)
			}
			if res.Linearizable() != (tt.want == porcupine.Ok) {
				t.Fatalf("Linearizable() = %v with outcome %s", res.Linearizable(), res.Outcome)
			}
		})
	}
}

func TestDuplicateValueRefused(t *testing.T) {
	_, err := CheckOperations([]porcupine.Operation{
		op(0, put("x", "a"), wrote(1), 0, 1),
		op(1, cas("y", 0, "a"), wrote(1), 0, 1),
	}, time.Second)
	if !errors.Is(err, ErrDuplicateValue) {
		t.Fatalf("err = %v, want ErrDuplicateValue", err)
	}
}

func TestMalformedHistoryRefused(t *testing.T) {
	tests := []struct {
		name string
		op   porcupine.Operation
	}{
		{"foreign input", porcupine.Operation{Input: "get x", Output: Output{}, Call: 0, Return: 1}},
		{"foreign output", porcupine.Operation{Input: get("x"), Output: "a", Call: 0, Return: 1}},
		{"return before call", porcupine.Operation{Input: get("x"), Output: Output{}, Call: 5, Return: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := CheckOperations([]porcupine.Operation{tt.op}, time.Second); err == nil {
				t.Fatal("malformed history accepted")
			}
		})
	}
}

// TestTimeoutIsNotAPass builds a history whose search is exponential (many
// concurrent writes, then a read of a value nobody wrote) and checks that a
// search cut short by its timeout is reported Unknown, not linearizable.
func TestTimeoutIsNotAPass(t *testing.T) {
	var history []porcupine.Operation
	for i := range 40 {
		history = append(history, op(i, put("x", fmt.Sprintf("v%d", i)), unknown, 0, -1))
	}
	history = append(history, op(99, get("x"), read("nobody wrote this", 7), 1, 2))
	res, err := CheckOperations(history, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != porcupine.Unknown || res.Linearizable() {
		t.Fatalf("got %s (linearizable %v), want Unknown and not linearizable", res.Outcome, res.Linearizable())
	}
}

// TestRecorder records a history with a stale read through the recorder,
// checks the verdict and counts, and writes the visualization.
func TestRecorder(t *testing.T) {
	r := NewRecorder()
	c0, c1 := r.NewClient(), r.NewClient()
	if c0 == c1 {
		t.Fatalf("NewClient returned %d twice", c0)
	}
	r.Begin(c0, put("x", "a")).Return(wrote(1))
	r.Begin(c0, put("x", "b")).Return(wrote(2))
	r.Begin(c0, put("x", "lost")).Unknown()
	r.Begin(c1, get("x")).Unknown() // a failed read: dropped
	r.Begin(c1, get("y")).Drop()
	start := r.Now()
	r.Begin(c1, get("x")).Return(read("a", 1)) // stale
	r.Annotate("nemesis", "isolate n1", start, r.Now())

	res, err := r.Check(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Linearizable() || res.Outcome != porcupine.Illegal {
		t.Fatalf("stale read not caught: %s", res)
	}
	if res.Operations != 4 || res.Unknown != 1 || res.Dropped != 2 || res.Keys != 1 {
		t.Fatalf("counts: %s", res)
	}
	path := filepath.Join(t.TempDir(), "history.html")
	if err := res.Visualize(path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("visualization %s not written: %v", path, err)
	}
}

// TestCallEndsOnce checks that a call's first ending wins.
func TestCallEndsOnce(t *testing.T) {
	r := NewRecorder()
	c := r.Begin(0, put("x", "a"))
	c.Return(wrote(1))
	c.Unknown()
	c.Drop()
	if recorded, unknownOps, dropped := r.Counts(); recorded != 1 || unknownOps != 0 || dropped != 0 {
		t.Fatalf("counts after three endings: recorded %d unknown %d dropped %d", recorded, unknownOps, dropped)
	}
}

// TestObservedUnknownWritesArePinned checks that writes of unknown outcome
// that reads observed are bounded without changing a verdict.
func TestObservedUnknownWritesArePinned(t *testing.T) {
	checkCounted(t, "pinned", func(r Result) int { return r.Pinned }, []countedCase{
		{"observed unknown put", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(2, get("x"), read("b", 2), 3, 4),
			op(2, get("x"), read("b", 2), 5, 6),
		}, porcupine.Ok, 1},
		{"observed unknown put and an acked put claim one version", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(2, get("x"), read("b", 2), 3, 4),
			op(0, put("x", "c"), wrote(2), 5, 6),
		}, porcupine.Illegal, 1},
		{"read of an unknown put's value before the put was called", []porcupine.Operation{
			op(2, get("x"), read("b", 1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
		}, porcupine.Illegal, 0},
		{"observed unknown CAS", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, cas("x", 1, "b"), unknown, 2, -1),
			op(2, get("x"), read("b", 2), 3, 4),
		}, porcupine.Ok, 1},
		{"unobserved unknown put stays open", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(2, get("x"), read("a", 1), 3, 4),
		}, porcupine.Ok, 0},
	})
}

// countedCase is a history, the verdict CheckOperations must reach on it,
// and how many operations it must report in one of its counts.
type countedCase struct {
	name    string
	history []porcupine.Operation
	want    porcupine.CheckResult
	count   int
}

// checkCounted runs CheckOperations on each case and compares the verdict
// and the count that count reads from the result (named what).
func checkCounted(t *testing.T, what string, count func(Result) int, tests []countedCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := CheckOperations(tt.history, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tt.want || count(res) != tt.count {
				t.Fatalf("got %s with %d %s, want %s with %d", res.Outcome, count(res), what, tt.want, tt.count)
			}
		})
	}
}

// TestManyObservedUnknownWritesCheckQuickly: 60 concurrent writes of
// unknown outcome, each observed once, in an order the search must find.
func TestManyObservedUnknownWritesCheckQuickly(t *testing.T) {
	const n = 60
	var history []porcupine.Operation
	for i := range n {
		history = append(history, op(i, put("x", fmt.Sprintf("v%d", i)), unknown, 0, -1))
	}
	for k := range n {
		i := (k * 7) % n // the order the writes took effect in
		history = append(history, op(100, get("x"), read(fmt.Sprintf("v%d", i), uint64(k+1)), int64(10+2*k), int64(11+2*k)))
	}
	res, err := CheckOperations(history, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Linearizable() || res.Pinned != n {
		t.Fatalf("got %s with %d pinned, want Ok with %d", res, res.Pinned, n)
	}
}

// TestUnobservedUnknownWritesPruned checks when a final read lets the check
// drop writes of unknown outcome that no read observed, and that verdicts
// do not change.
func TestUnobservedUnknownWritesPruned(t *testing.T) {
	checkCounted(t, "pruned", func(r Result) int { return r.Pruned }, []countedCase{
		{"final read finds the key absent", []porcupine.Operation{
			op(1, put("x", "b"), unknown, 0, -1),
			op(2, get("x"), absent, 5, 6),
		}, porcupine.Ok, 1},
		{"every version up to the final read's is claimed", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(1, cas("x", 1, "c"), unknown, 2, -1),
			op(0, put("x", "d"), wrote(2), 3, 4),
			op(2, get("x"), read("d", 2), 5, 6),
		}, porcupine.Ok, 2},
		{"a version only an unknown write can have made", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(0, put("x", "c"), wrote(3), 3, 4),
			op(2, get("x"), read("c", 3), 5, 6),
		}, porcupine.Ok, 0},
		{"only the unknown writes called after a higher version was seen", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(0, put("x", "c"), wrote(3), 3, 4),
			op(3, put("x", "d"), unknown, 5, -1),
			op(2, get("x"), read("c", 3), 6, 7),
			op(2, get("x"), read("c", 3), 8, 9),
		}, porcupine.Ok, 1},
		{"the last read overlaps another operation", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(0, put("x", "d"), wrote(2), 3, 7),
			op(2, get("x"), read("a", 1), 5, 6),
		}, porcupine.Ok, 0},
		{"an illegal history stays illegal", []porcupine.Operation{
			op(0, put("x", "a"), wrote(1), 0, 1),
			op(1, put("x", "b"), unknown, 2, -1),
			op(0, put("x", "d"), wrote(2), 3, 4),
			op(2, get("x"), read("a", 1), 5, 6),
			op(2, get("x"), read("d", 2), 7, 8),
		}, porcupine.Illegal, 1},
	})
}

// TestManyUnobservedUnknownWritesCheckQuickly: 40 writes of unknown outcome
// that nothing observed, among acknowledged writes and reads, then a final
// read.
func TestManyUnobservedUnknownWritesCheckQuickly(t *testing.T) {
	var history []porcupine.Operation
	now := int64(0)
	for i := range 40 {
		history = append(history, op(100+i, put("x", fmt.Sprintf("lost%d", i)), unknown, now, -1))
		v := uint64(i + 1)
		history = append(history,
			op(0, put("x", fmt.Sprintf("v%d", i)), wrote(v), now+1, now+2),
			op(1, get("x"), read(fmt.Sprintf("v%d", i), v), now+3, now+4))
		now += 5
	}
	history = append(history, op(2, get("x"), read("v39", 40), now, now+1))
	res, err := CheckOperations(history, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Linearizable() || res.Pruned != 40 {
		t.Fatalf("got %s, want Ok with 40 pruned", res)
	}
}
