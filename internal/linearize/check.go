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
	// before the check (failed reads), and distinct Keys.
	Operations, Unknown, Dropped, Keys int
	Duration                           time.Duration // time the search took
	// Info is Porcupine's linearization info, for Visualize.
	Info porcupine.LinearizationInfo
}

// Linearizable reports whether the history was proven linearizable. A search
// that timed out (Unknown) is not a pass.
func (r Result) Linearizable() bool { return r.Outcome == porcupine.Ok }

// String is the one-line summary a suite prints at its end.
func (r Result) String() string {
	return fmt.Sprintf("%d operations on %d keys checked in %v: %s (%d unknown outcomes, %d failed reads dropped)",
		r.Operations, r.Keys, r.Duration.Round(time.Millisecond), r.Outcome, r.Unknown, r.Dropped)
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
	start := time.Now()
	res.Outcome, res.Info = porcupine.CheckOperationsVerbose(Model(), history, timeout)
	res.Duration = time.Since(start)
	return res, nil
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
