package linearize

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects a history of concurrent client operations. It is safe
// for concurrent use. Timestamps are monotonic nanoseconds since the
// recorder was made.
type Recorder struct {
	start time.Time

	mu          sync.Mutex             // guards the fields below
	ops         []porcupine.Operation  // completed and unknown operations
	annotations []porcupine.Annotation // nemesis events and other notes
	clients     int                    // client ids handed out
	unknown     int                    // operations recorded with an unknown outcome
	dropped     int                    // operations forgotten (failed reads, refused connections)
}

// NewRecorder returns an empty history whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now()}
}

// Now is the recorder's clock: nanoseconds since it was made.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// NewClient returns a fresh client id. A client whose last operation had an
// unknown outcome should take a new id, since that operation is still open.
func (r *Recorder) NewClient() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients++
	return r.clients - 1
}

// Call is one operation in flight. Exactly one of Return, Unknown or Drop
// ends it; later calls are ignored.
type Call struct {
	recorder *Recorder
	client   int
	input    Input
	call     int64
	once     sync.Once
}

// Begin records that client invokes in, now: call it just before sending.
func (r *Recorder) Begin(client int, in Input) *Call {
	return &Call{recorder: r, client: client, input: in, call: r.Now()}
}

// Return records a definite outcome, now: call it just after the answer arrived.
func (c *Call) Return(out Output) {
	c.once.Do(func() {
		out.Unknown = false
		c.recorder.add(porcupine.Operation{
			ClientId: c.client, Input: c.input, Output: out, Call: c.call, Return: c.recorder.Now(),
		}, false)
	})
}

// Unknown records that the outcome is unknown. A write stays in the history,
// open until the end of time; a read is dropped, since it observed nothing.
func (c *Call) Unknown() {
	c.once.Do(func() {
		if c.input.Kind == Get {
			c.recorder.drop()
			return
		}
		c.recorder.add(porcupine.Operation{
			ClientId: c.client, Input: c.input, Output: Output{Unknown: true}, Call: c.call, Return: math.MaxInt64,
		}, true)
	})
}

// Drop forgets the operation: a failed read, or a write that certainly never
// reached a server (its connection was refused).
func (c *Call) Drop() {
	c.once.Do(c.recorder.drop)
}

func (r *Recorder) add(op porcupine.Operation, unknown bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if unknown {
		r.unknown++
	}
}

func (r *Recorder) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped++
}

// Annotate adds a note (a nemesis event) spanning [start, end] to the
// visualization, on a line of its own tagged tag.
func (r *Recorder) Annotate(tag, description string, start, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.annotations = append(r.annotations, porcupine.Annotation{
		Tag: tag, Start: start, End: end, Description: description,
	})
}

// Operations returns a copy of the recorded history.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Counts returns how many operations were recorded, how many of them have an
// unknown outcome, and how many were dropped.
func (r *Recorder) Counts() (recorded, unknown, dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops), r.unknown, r.dropped
}

// Check checks the recorded history; see CheckOperations.
func (r *Recorder) Check(timeout time.Duration) (Result, error) {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	annotations := append([]porcupine.Annotation(nil), r.annotations...)
	dropped := r.dropped
	r.mu.Unlock()
	res, err := CheckOperations(ops, timeout)
	res.Dropped = dropped
	res.Info.AddAnnotations(annotations)
	return res, err
}
