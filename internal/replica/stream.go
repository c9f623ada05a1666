package replica

import (
	"context"
	"sync"

	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/raftnode"
)

// Ordered streams of writes (internal/fsm, stream.go): a client connection
// with several writes in flight at once proposes them as a Stream, each
// write holding a Turn. Propose, given a Turn in its context (WithTurn),
// waits until the turn before it ended, then stamps the command with the
// stream's tag and the next seq, and proposes it; its turn ends as soon as
// the entry has its place in the raft node's order of proposals
// (raftnode.Node.ProposePlaced: it joined the open batch, and batches are
// stepped in order), so that the stream's next write can join the same
// batch. So the entries of one stream reach this member's raft node in the
// order the writes were sent, and the state machine, which applies a
// stream's write only after its predecessor, refuses the rest of the
// stream if one is lost on its way to the log, or reaches it out of order
// (a batch raft dropped for want of a leader, whose proposals are stepped
// again each on its own).
// A write that ends its turn before it is proposed (refused by a check,
// overloaded) takes no seq: the next write takes it.

// Stream is the ordered stream of writes of one client connection of a
// session, in one consensus group.
type Stream struct {
	session, id, floor uint64

	mu   sync.Mutex
	seq  uint64 // the seq of the latest write stamped; guarded by mu
	last *Turn  // the latest turn handed out; guarded by mu
}

// NewStream returns the stream id (random, non-zero) of session, opened
// with floor: an index read through a linearizable barrier of the meta
// group when the connection was opened (command.Command.StreamFloor).
func NewStream(session, id, floor uint64) *Stream {
	return &Stream{session: session, id: id, floor: floor}
}

// Turn is one write's place in its stream.
type Turn struct {
	stream *Stream
	prev   <-chan struct{} // closed when the turn before ended; nil for none
	done   chan struct{}
	once   sync.Once
	// lose is a test hook: the write takes its seq but its entry never
	// reaches raft, as a proposal lost in a leader change.
	lose bool
	// stamped: the turn's write took its seq; a turn proposes once.
	stamped bool
	// carrier is the context WithTurn returns, kept in the turn so that
	// carrying it costs no allocation of its own.
	carrier turnContext
}

// turnContext is a context carrying a turn (turnKey).
type turnContext struct {
	context.Context
	turn *Turn
}

func (c *turnContext) Value(key any) any {
	if _, ok := key.(turnKey); ok {
		return c.turn
	}
	return c.Context.Value(key)
}

// Next returns the turn of the stream's next write, which proposes after
// every turn handed out before it ended.
func (s *Stream) Next() *Turn { return s.NextIn(new(Turn)) }

// NextIn is Next with the turn made in t, a zero Turn that the caller
// allocated within something it holds for the write anyway.
func (s *Stream) NextIn(t *Turn) *Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.stream, t.done = s, make(chan struct{})
	if s.last != nil {
		t.prev = s.last.done
	}
	s.last = t
	return t
}

// End ends the turn (idempotent): the next write of the stream may propose.
// Propose ends it once the entry has its place (Placed); the holder ends it
// when the write is over, whether or not it was proposed.
func (t *Turn) End() {
	if t != nil {
		t.once.Do(func() { close(t.done) })
	}
}

// Placed ends the turn: the raft node placed its write's entry
// (raftnode.Placement).
func (t *Turn) Placed() { t.End() }

// placement is t as the raft node's Placement, or nil for no turn (a nil
// *Turn in the interface would not be nil).
func placement(t *Turn) raftnode.Placement {
	if t == nil {
		return nil
	}
	return t
}

// LoseForTest makes the turn's write take its seq and then be lost before
// it reaches raft (Propose answers unavailable): what a proposal dropped in
// a leader change does. For tests of the stream's order only.
func (t *Turn) LoseForTest() { t.lose = true }

// wait blocks until the turn before t ended, or d is done. It waits on
// d's parent and a pooled timer, not on d's Done, which would make a
// context (deadline.go): under pipelined writes a turn often waits.
func (t *Turn) wait(d *deadline) error {
	if t.prev == nil {
		return nil
	}
	select {
	case <-t.prev:
		return nil
	default:
	}
	timer := waitTimer(d.remaining())
	defer releaseTimer(timer)
	select {
	case <-t.prev:
		return nil
	case <-d.parent.Done():
		return d.parent.Err()
	case <-timer.C:
		return context.DeadlineExceeded
	}
}

// stamp tags cmd as the stream's next write.
func (t *Turn) stamp(cmd *command.Command) {
	s := t.stream
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	cmd.StreamID, cmd.StreamFloor, cmd.StreamSeq = s.id, s.floor, s.seq
}

// turnKey carries a *Turn in a context.
type turnKey struct{}

// WithTurn returns ctx carrying turn: Propose under it proposes a write of
// the stream's session in the turn's order, with the stream's tag. The
// turn's write calls it once, before it proposes (the context lives in the
// turn: a second call replaces it).
func WithTurn(ctx context.Context, turn *Turn) context.Context {
	if turn == nil {
		return ctx
	}
	turn.carrier = turnContext{Context: ctx, turn: turn}
	return &turn.carrier
}

// turnOf returns the turn ctx carries, or nil.
func turnOf(ctx context.Context) *Turn {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t
}
