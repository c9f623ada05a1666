package linearize

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// ErrDuplicateValue means two writes in a history wrote the same value, so
// reads would not name the write they observed: the history is not checkable.
var ErrDuplicateValue = errors.New("linearize: a value is written twice")

// Result is the verdict on one history.
type Result struct {
	// Outcome is Porcupine's verdict; only porcupine.Ok is a pass.
	Outcome porcupine.CheckResult
	// Operations checked, Unknown among them (open to the end), Dropped
	// before the check (failed reads), and distinct Keys. Pinned counts the
	// Unknown writes that a read observed, which the check bounds (see
	// pinObserved), and Pruned those that a final read shows took no effect
	// before it (see pruneUnobserved).
	Operations, Unknown, Pinned, Pruned, Dropped, Keys int
	Duration                                           time.Duration // time the search took
	// Info is Porcupine's linearization info, for Visualize.
	Info porcupine.LinearizationInfo
}

// Linearizable reports whether the history was proven linearizable. A search
// that timed out (Unknown) is not a pass.
func (r Result) Linearizable() bool { return r.Outcome == porcupine.Ok }

// String is the one-line summary a suite prints at its end.
func (r Result) String() string {
	return fmt.Sprintf("%d operations on %d keys checked in %v: %s (%d unknown outcomes: %d observed by reads, %d without effect before a final read; %d failed reads dropped)",
		r.Operations, r.Keys, r.Duration.Round(time.Millisecond), r.Outcome, r.Unknown, r.Pinned, r.Pruned, r.Dropped)
}

// Visualize writes Porcupine's HTML visualization of the history to path.
func (r Result) Visualize(path string) error {
	if err := porcupine.VisualizePath(Model(), r.Info, path); err != nil {
		return fmt.Errorf("linearize: write visualization %s: %w", path, err)
	}
	return nil
}

// CheckOperations checks that history (Inputs and Outputs of this package)
// is linearizable under Model, searching for at most timeout. It returns an
// error, and no verdict, if the history is malformed: a value written twice,
// or an operation that is not of this model.
func CheckOperations(history []porcupine.Operation, timeout time.Duration) (Result, error) {
	if err := validate(history); err != nil {
		return Result{}, err
	}
	res := Result{Operations: len(history)}
	keys := map[string]bool{}
	for _, op := range history {
		keys[op.Input.(Input).Key] = true
		if op.Return == math.MaxInt64 {
			res.Unknown++
		}
	}
	res.Keys = len(keys)
	history, res.Pinned = pinObserved(history)
	history, res.Pruned = pruneUnobserved(history)
	start := time.Now()
	res.Outcome, res.Info = porcupine.CheckOperationsVerbose(Model(), history, timeout)
	res.Duration = time.Since(start)
	return res, nil
}

// pinObserved returns history with every write of unknown outcome whose
// value some read returned made definite: since values are unique, that
// write took effect and created the version the read saw, and it took
// effect before the earliest such read returned. Both facts hold in every
// linearization of the original history, so the verdict is the same; but a
// write left open to the end can be placed anywhere after its call, and a
// few hundred of them among tens of thousands of operations can make the
// search exponential (a soak's 90-second search once ended Unknown). A
// read that returned before the write was called is left alone (no
// linearization exists; the search finds that). history is not modified.
func pinObserved(history []porcupine.Operation) ([]porcupine.Operation, int) {
	type written struct{ key, value string }
	type observation struct {
		version uint64
		ret     int64 // earliest return of a read that saw the value
	}
	seen := map[written]observation{}
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != Get || !out.Found {
			continue
		}
		w := written{in.Key, out.Value}
		if o, ok := seen[w]; !ok || op.Return < o.ret {
			seen[w] = observation{version: out.Version, ret: op.Return}
		}
	}
	out := make([]porcupine.Operation, len(history))
	pinned := 0
	for i, op := range history {
		out[i] = op
		in, result := op.Input.(Input), op.Output.(Output)
		if in.Kind == Get || !result.Unknown {
			continue
		}
		o, ok := seen[written{in.Key, in.Value}]
		if !ok || o.ret < op.Call {
			continue
		}
		out[i].Output = Output{Version: o.version}
		out[i].Return = o.ret
		pinned++
	}
	return out, pinned
}

// pruneUnobserved removes, per key, the writes of unknown outcome that no
// read observed, when a final read proves none of them took effect before
// it. A final read is a successful get of the key called after every
// operation of the key with a known outcome returned (a suite reads each key
// once more after its clients stopped). Each version up to the one it read
// was made by exactly one write; an unobserved unknown write cannot have
// made a version a write of known outcome or a pinned one (see pinObserved)
// made, and it cannot have made an unclaimed version v if it was called
// after an operation that made or read a version above v returned. Such a
// write cannot have taken effect before the final read: a put always makes
// a version, and a CAS makes one or is a no-op. So in any linearization it
// is a no-op or placed after the final read, where only operations of
// unknown outcome can be, which nothing observes: removing it keeps a
// linearization, and appending removed ones at the end of a linearization
// of the rest is always legal. The verdict is the same, and the search no
// longer weighs where each of them went.
func pruneUnobserved(history []porcupine.Operation) ([]porcupine.Operation, int) {
	final := map[string]int{} // key -> index of its known-outcome get called last
	for i, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != Get || out.Unknown {
			continue
		}
		if last, ok := final[in.Key]; !ok || op.Call > history[last].Call {
			final[in.Key] = i
		}
	}
	claimed := map[string]map[uint64]bool{} // versions created by known or pinned writes
	for i, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Unknown {
			continue
		}
		if f, ok := final[in.Key]; ok && i != f && op.Return >= history[f].Call {
			delete(final, in.Key) // not called after everything else returned
		}
		if in.Kind != Get && !out.Refused {
			if claimed[in.Key] == nil {
				claimed[in.Key] = map[uint64]bool{}
			}
			claimed[in.Key][out.Version] = true
		}
	}
	// An unobserved write made no version the known and pinned writes
	// claim; so if it took effect before the final read, it made an
	// unclaimed version at most the highest one, unclaimed, and it came
	// before every operation that made or read a higher version: it was
	// called before the earliest return of those (cutoff).
	highest := map[string]uint64{} // highest unclaimed version, 0 if none
	cutoff := map[string]int64{}
	for key, f := range final {
		for v := history[f].Output.(Output).Version; v >= 1 && highest[key] == 0; v-- {
			if !claimed[key][v] {
				highest[key] = v
			}
		}
		cutoff[key] = math.MaxInt64
		if highest[key] == 0 {
			cutoff[key] = math.MinInt64
		}
	}
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if h := highest[in.Key]; h > 0 && !out.Unknown && !out.Refused && out.Version > h {
			cutoff[in.Key] = min(cutoff[in.Key], op.Return)
		}
	}
	keep := make([]porcupine.Operation, 0, len(history))
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if f, ok := final[in.Key]; ok && in.Kind != Get && out.Unknown && op.Call >= cutoff[in.Key] && op.Call < history[f].Call {
			continue
		}
		keep = append(keep, op)
	}
	return keep, len(history) - len(keep)
}

func validate(history []porcupine.Operation) error {
	written := map[string]bool{}
	for i, op := range history {
		in, ok := op.Input.(Input)
		if !ok {
			return fmt.Errorf("linearize: operation %d has input %T, not linearize.Input", i, op.Input)
		}
		if _, ok := op.Output.(Output); !ok {
			return fmt.Errorf("linearize: operation %d has output %T, not linearize.Output", i, op.Output)
		}
		if op.Return < op.Call {
			return fmt.Errorf("linearize: operation %d returns at %d before its call at %d", i, op.Return, op.Call)
		}
		if in.Kind == Get {
			continue
		}
		if written[in.Value] {
			return fmt.Errorf("%w: %q (operation %d)", ErrDuplicateValue, in.Value, i)
		}
		written[in.Value] = true
	}
	return nil
}
