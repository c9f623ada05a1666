package server

import (
	"context"
	"errors"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
)

// TxnKind is the kind of one operation of a transaction.
type TxnKind uint8

// The operations of a transaction (docs/api.md POST /v1/txn).
const (
	TxnCreate TxnKind = iota // make a node that must not exist (Ephemeral, Sequential)
	TxnSet                   // write an existing node (AtVersion: at Version)
	TxnDelete                // delete an existing node (AtVersion: at Version; Recursive)
	TxnCheck                 // change nothing: the node exists (AnyVersion), is absent (NoNode) or is at Version (AtVersion)
)

// TxnOp is one operation of a transaction.
type TxnOp struct {
	Kind         TxnKind
	Path         string
	Value        []byte
	Precondition Precondition
	Version      uint64 // with AtVersion
	Ephemeral    bool
	Sequential   bool
	Recursive    bool
}

// TxnRequest is a transaction: Ops applied in order, all or nothing, at one
// raft index, on behalf of SessionID if set (the owner of its ephemeral
// creates), exactly once with RequestSeq as a Put is.
type TxnRequest struct {
	Ops        []TxnOp
	SessionID  uint64
	RequestSeq uint64
	// TimeMs is as PutRequest's: the time the transaction's writes record
	// (0: this member's clock).
	TimeMs uint64
	// Turn, if set, is the transaction's place in an ordered stream of
	// writes of SessionID (WriteStream): it is proposed after the stream's
	// earlier writes, and applied only after them. Only with one shard:
	// with several, the protocol steps of a write may propose it more than
	// once, which a stream cannot tell from a lost write.
	Turn *WriteTurn
	// Place says the transaction makes a place at the back of a queue (a
	// ZooKeeper lock or election recipe's ephemeral sequential node): if
	// its parent has children here already, the place is behind another
	// and is proposed deferred (replica.Deferred, replica.PlaceDeferral),
	// to leave with the next write at the raft leader.
	Place bool
}

// WriteStream is the ordered stream of writes of one client connection of
// a session (replica.Stream): a connection that sends writes with earlier
// ones still in flight gives each a turn (Next), and the state machine
// applies them in the order of their turns, refusing every write after one
// that is lost (internal/fsm, stream.go).
type WriteStream = replica.Stream

// WriteTurn is one write's place in a WriteStream; its holder ends it
// (End) when the write is over.
type WriteTurn = replica.Turn

// NewWriteStream returns a stream of session's writes, with a random id,
// opened at floor: an applied index read after a linearizable barrier of
// the meta group when the connection was opened (so a later connection of
// the session has a higher one).
func NewWriteStream(session, floor uint64) (*WriteStream, error) {
	id, err := NewSessionID() // 64 random bits, never 0
	if err != nil {
		return nil, err
	}
	return replica.NewStream(session, id, max(floor, 1)), nil
}

// TxnOpResult is the node an operation left, right after it (see
// fsm.TxnOpResult): what ZooKeeper's multi reports per operation.
type TxnOpResult struct {
	Path          string
	Version       uint64
	CreatedIndex  uint64
	ModifiedIndex uint64
	Owner         uint64 // the owning session of an ephemeral node; 0 = persistent
	DataLength    int
	ChildrenCount int
	// CreatedAtMs, ChildrenVersion and ChildrenModifiedIndex are as
	// NodeView's (0 for a deleted node).
	CreatedAtMs, ChildrenVersion, ChildrenModifiedIndex uint64
}

// TxnResult is an applied transaction: a result per operation and the
// index it was applied at.
type TxnResult struct {
	Ops   []TxnOpResult
	Index uint64
	Shard int // the shard whose log Index is of: every operation's
}

// Txn applies a transaction once a quorum has it and this server applied
// it. A refusal because of one operation (checked here, or by the state
// machine at the transaction's place in the log) is an *api.TxnOpError
// naming it; then nothing was applied. Every operation must live in one
// consensus group (docs/design.md "Operations spanning shards").
func (s *Server) Txn(ctx context.Context, r TxnRequest) (TxnResult, error) {
	if err := s.authorizeTxn(ctx, r); err != nil {
		return TxnResult{}, err
	}
	cmd, err := s.txnCommand(r)
	if err != nil {
		return TxnResult{}, err
	}
	g, err := s.txnGroup(r.Ops)
	if err != nil {
		return TxnResult{}, err
	}
	if r.Turn != nil {
		if s.cfg.Shards > 1 || r.SessionID == 0 {
			return TxnResult{}, api.Errorf(api.CodeInvalidArgument, "an ordered write needs a session and a cluster of one shard")
		}
		ctx = replica.WithTurn(ctx, r.Turn)
	}
	if r.Place && parentHasChildren(g, r.Ops) {
		ctx = replica.Deferred(ctx, replica.PlaceDeferral)
	}
	res, index, err := g.Propose(ctx, cmd)
	if err != nil {
		return TxnResult{}, err
	}
	out, err := txnResult(res, index)
	out.Shard = g.shard
	return out, err
}

// parentHasChildren reports whether the create among ops has a parent with
// children in g's applied state (a hint, read without a barrier): a place
// created there would be behind them, as it is in a lock or election
// recipe's queue.
func parentHasChildren(g *group, ops []TxnOp) bool {
	for _, op := range ops {
		if op.Kind != TxnCreate {
			continue
		}
		var n fsm.Node
		var err error
		g.View(func(f *fsm.FSM) { n, err = f.Get(api.Parent(op.Path)) })
		return err == nil && n.ChildrenCount > 0
	}
	return false
}

// txnCommand validates r as far as it can without the state and builds its
// command.
func (s *Server) txnCommand(r TxnRequest) (*command.Command, error) {
	if err := checkTxnSize(r.Ops); err != nil {
		return nil, err
	}
	if r.RequestSeq != 0 && r.SessionID == 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "request_seq needs a session_id")
	}
	cmd := newTxnCommand(len(r.Ops))
	cmd.SessionID, cmd.RequestSeq, cmd.TimeMs = r.SessionID, r.RequestSeq, r.TimeMs
	for i := range r.Ops {
		op, err := s.txnOpCommand(&r.Ops[i], r.SessionID)
		if err != nil {
			return nil, &api.TxnOpError{Op: i, Err: asAPIError(err)}
		}
		cmd.Ops[i] = op
	}
	return cmd, nil
}

// oneOpTxn is a transaction command of one operation with its operation,
// made in one allocation: most transactions are a client's single write.
type oneOpTxn struct {
	cmd command.Command
	ops [1]command.TxnOp
}

// newTxnCommand returns a transaction command with room for n operations.
func newTxnCommand(n int) *command.Command {
	if n == 1 {
		t := &oneOpTxn{cmd: command.Command{Op: command.OpTxn}}
		t.cmd.Ops = t.ops[:]
		return &t.cmd
	}
	return &command.Command{Op: command.OpTxn, Ops: make([]command.TxnOp, n)}
}

// checkTxnSize refuses a transaction with no operation, too many, or too
// many bytes of paths and values.
func checkTxnSize(ops []TxnOp) error {
	if len(ops) == 0 {
		return api.Errorf(api.CodeInvalidArgument, "a transaction needs at least one operation")
	}
	if len(ops) > api.MaxTxnOps {
		return api.Errorf(api.CodeTooLarge, "transaction of %d operations, over the limit of %d", len(ops), api.MaxTxnOps)
	}
	total := 0
	for i := range ops {
		total += len(ops[i].Path) + len(ops[i].Value)
	}
	if total > api.MaxTxnBytes {
		return api.Errorf(api.CodeTooLarge, "transaction paths and values are %d bytes, over the limit of %d", total, api.MaxTxnBytes)
	}
	return nil
}

// txnOpCommand checks one operation and returns it as a command carries it.
func (s *Server) txnOpCommand(op *TxnOp, session uint64) (command.TxnOp, error) {
	if err := api.ValidatePath(op.Path); err != nil {
		return command.TxnOp{}, err
	}
	if len(op.Value) > s.cfg.MaxValueSize {
		return command.TxnOp{}, api.Errorf(api.CodeTooLarge, "value is %d bytes, over the limit of %d", len(op.Value), s.cfg.MaxValueSize)
	}
	if op.Ephemeral && session == 0 {
		return command.TxnOp{}, api.Errorf(api.CodeInvalidArgument, "an ephemeral node needs a session_id")
	}
	if op.Kind == TxnCreate || op.Kind == TxnSet {
		if refusePlainQueueWrite(op.Path) != nil {
			return command.TxnOp{}, api.Errorf(api.CodeInvalidArgument,
				"%s is reserved for locks and elections: write there through /v1/lock and /v1/election, not in a transaction", op.Path)
		}
	}
	kind, err := op.Kind.command()
	if err != nil {
		return command.TxnOp{}, err
	}
	precondition, err := op.Precondition.command()
	if err != nil {
		return command.TxnOp{}, err
	}
	return command.TxnOp{
		Kind: kind, Path: op.Path, Value: op.Value, Precondition: precondition, Version: op.Version,
		Ephemeral: op.Ephemeral, Sequential: op.Sequential, Recursive: op.Recursive,
	}, nil
}

// command returns the kind as a command carries it; an unknown one is
// refused.
func (k TxnKind) command() (command.TxnKind, error) {
	switch k {
	case TxnCreate:
		return command.TxnCreate, nil
	case TxnSet:
		return command.TxnSet, nil
	case TxnDelete:
		return command.TxnDelete, nil
	case TxnCheck:
		return command.TxnCheck, nil
	}
	return 0, api.Errorf(api.CodeInvalidArgument, "unknown transaction operation %d", k)
}

// txnGroup returns the one group every operation's path belongs to.
func (s *Server) txnGroup(ops []TxnOp) (*group, error) {
	paths := make([]string, len(ops))
	for i := range ops {
		paths[i] = ops[i].Path
	}
	if _, err := oneGroup(paths, func(path string) uint64 { return uint64(s.groupFor(path).shard) }); err != nil {
		return nil, err
	}
	return s.groupFor(paths[0]), nil
}

// oneGroup returns the group groupOf gives every path, or an
// invalid_argument naming the first two that differ: a transaction is
// atomic within one consensus group's log only, so it is confined to one
// shard. paths is not empty. The message names groupOf's numbers as
// shards, so the callers pass the shard (not the consensus-group id,
// which is one more).
func oneGroup(paths []string, groupOf func(path string) uint64) (uint64, error) {
	first := groupOf(paths[0])
	for i, p := range paths[1:] {
		if g := groupOf(p); g != first {
			return 0, api.Errorf(api.CodeInvalidArgument,
				"transaction spans shards %d and %d (%q is in shard %d, %q in shard %d): a transaction is atomic within one shard only",
				first, g, paths[0], first, paths[i+1], g)
		}
	}
	return first, nil
}

// txnResult turns the state machine's result of a transaction applied at
// index into the reply or the refusal.
func txnResult(res fsm.Result, index uint64) (TxnResult, error) {
	if res.Err != nil {
		if res.Txn != nil {
			return TxnResult{}, &api.TxnOpError{Op: res.Txn.Failed, Err: asAPIError(res.Err)}
		}
		return TxnResult{}, res.Err
	}
	out := TxnResult{Ops: make([]TxnOpResult, len(res.Txn.Ops)), Index: index}
	for i, op := range res.Txn.Ops {
		out.Ops[i] = TxnOpResult{
			Path: op.Node.Path, Version: op.Node.Version, CreatedIndex: op.Node.CreatedIndex, ModifiedIndex: op.Node.ModifiedIndex,
			Owner: op.Owner, DataLength: op.DataLength, ChildrenCount: op.ChildrenCount,
			CreatedAtMs: op.CreatedAtMs, ChildrenVersion: op.ChildrenVersion, ChildrenModifiedIndex: op.ChildrenModifiedIndex,
		}
	}
	return out, nil
}

// asAPIError returns the *api.Error err is or wraps; any other error (none
// is expected: validation and the state machine return *api.Error) becomes
// an invalid_argument.
func asAPIError(err error) *api.Error {
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return api.Errorf(api.CodeInvalidArgument, "%v", err)
}
