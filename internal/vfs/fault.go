package vfs

import (
	"errors"
	"path/filepath"
	"time"
)

// Op is a kind of filesystem call, used to aim injected faults. Ops combine
// as a bit set.
type Op uint32

// The kinds of call MemFS can fail or delay.
const (
	OpCreate Op = 1 << iota
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpSyncDir
	OpRename
	OpRemove
	OpTruncate
	OpPreallocate
	OpMkdir
	OpList
	OpStat
	OpLock

	// OpMutating is every call that changes the filesystem's state:
	// failing all of them from some point on simulates the process dying
	// at that point.
	OpMutating = OpCreate | OpWrite | OpSync | OpSyncDir | OpRename | OpRemove | OpTruncate | OpPreallocate | OpMkdir
	// OpAny is every call.
	OpAny Op = ^Op(0)
)

// ErrCrashed is the error MemFS.CrashAfter injects: the simulated process is
// dead and nothing it does reaches the disk any more.
var ErrCrashed = errors.New("vfs: simulated crash")

// Fault describes calls to fail or slow down. A call matches when its kind
// is in Ops and its file's base name matches Pattern (filepath.Match; empty
// matches every name).
type Fault struct {
	Ops     Op
	Pattern string
	// Skip lets this many matching calls through before the fault acts.
	Skip int
	// Count is how many matching calls the fault acts on; 0 means every
	// later matching call.
	Count int
	// Err is returned by the affected calls; nil only delays them.
	Err error
	// Delay is slept before an affected call runs (latency injection).
	Delay time.Duration
	// Hold, if not nil, blocks an affected call, after Delay, until it is
	// closed: a stall that lasts until the test ends it, whatever time (real
	// or a test's virtual time) passes meanwhile. The call is counted (Calls)
	// before it blocks, so a test can see that it is held.
	Hold <-chan struct{}
	// PartialWrite makes a failing Write or WriteAt store the first half of
	// its bytes before returning Err, as a full disk or a crash might.
	PartialWrite bool
}

// faultState is a Fault and the number of matching calls it has seen.
type faultState struct {
	Fault
	seen int
}

// verdict is what the faults say about one call.
type verdict struct {
	err     error
	delay   time.Duration
	holds   []<-chan struct{}
	partial bool
}

// applyLocked counts the call against every fault and returns the combined
// verdict: the first fault with an error wins, delays add up, and the call
// waits for every hold.
func (state *faultState) applyLocked(op Op, name string, out *verdict) {
	if state.Ops&op == 0 || !matchName(state.Pattern, name) {
		return
	}
	state.seen++
	if state.seen <= state.Skip {
		return
	}
	if state.Count > 0 && state.seen > state.Skip+state.Count {
		return
	}
	out.delay += state.Delay
	if state.Hold != nil {
		out.holds = append(out.holds, state.Hold)
	}
	if out.err == nil && state.Err != nil {
		out.err = state.Err
		out.partial = state.PartialWrite
	}
}

func matchName(pattern, name string) bool {
	if pattern == "" {
		return true
	}
	matched, err := filepath.Match(pattern, filepath.Base(name))
	return err == nil && matched
}

// wait sleeps the verdict's delay, then blocks until every hold is closed.
func (out *verdict) wait() {
	if out.delay > 0 {
		time.Sleep(out.delay)
	}
	for _, hold := range out.holds {
		<-hold
	}
}
