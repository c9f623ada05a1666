package client

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/latch-io/latch/api"
)

// Txn builds a transaction (docs/api.md POST /v1/txn): operations applied
// in order, all or nothing, at one raft index. Build it with the methods
// below, which return the Txn, then Commit it:
//
//	reply, err := c.Txn().
//		Set("/accounts/alice", "70", client.PrevVersion(1)).
//		Set("/accounts/bob", "30", client.PrevVersion(1)).
//		Commit(ctx)
//
// A refusal because of one operation is an *api.TxnOpError (errors.As),
// which wraps the operation's *api.Error. A Txn is not safe for concurrent
// use; Commit it once.
type Txn struct {
	client  *Client
	ops     []api.TxnOp
	session *Session
	err     error // the first mistake in building, returned by Commit
}

// Txn starts an empty transaction.
func (c *Client) Txn() *Txn { return &Txn{client: c} }

// WithSession makes the transaction s's: s owns its ephemeral creates and
// may delete its own ephemeral nodes, and the transaction carries a fresh
// request_seq, so retries after failover are applied exactly once.
func (t *Txn) WithSession(s *Session) *Txn {
	t.session = s
	return t
}

// Create adds the creation of a node that must not exist; Ephemeral (with
// WithSession) and Sequential apply.
func (t *Txn) Create(path, value string, opts ...WriteOption) *Txn {
	o := applyWriteOptions(opts)
	switch {
	case o.prevVersion != "":
		t.fail("Create takes no PrevVersion: the node must not exist")
	case o.recursive:
		t.fail("Recursive applies to Delete, not Create")
	}
	return t.add(api.TxnOp{Op: api.TxnCreate, Path: path, Value: &value, Ephemeral: o.ephemeral, Sequential: o.sequential}, o)
}

// Set adds a write of an existing node; with PrevVersion it must have that
// version.
func (t *Txn) Set(path, value string, opts ...WriteOption) *Txn {
	o := applyWriteOptions(opts)
	if o.ephemeral || o.sequential || o.recursive {
		t.fail("Set takes only PrevVersion")
	}
	op := api.TxnOp{Op: api.TxnSet, Path: path, Value: &value}
	op.Version = t.version(o, "Set")
	return t.add(op, o)
}

// Delete adds the deletion of an existing node; PrevVersion and Recursive
// apply.
func (t *Txn) Delete(path string, opts ...WriteOption) *Txn {
	o := applyWriteOptions(opts)
	if o.ephemeral || o.sequential {
		t.fail("Ephemeral and Sequential apply to Create, not Delete")
	}
	op := api.TxnOp{Op: api.TxnDelete, Path: path, Recursive: o.recursive}
	op.Version = t.version(o, "Delete")
	return t.add(op, o)
}

// Check adds a condition that changes nothing: the node exists, or with
// PrevVersion(n) has version n, or with PrevNone does not exist.
func (t *Txn) Check(path string, opts ...WriteOption) *Txn {
	o := applyWriteOptions(opts)
	if o.ephemeral || o.sequential || o.recursive {
		t.fail("Check takes only PrevVersion or PrevNone")
	}
	op := api.TxnOp{Op: api.TxnCheck, Path: path}
	if o.prevVersion == "none" {
		zero := uint64(0)
		op.Version = &zero
	} else {
		op.Version = t.version(o, "Check")
	}
	return t.add(op, o)
}

// Op adds an operation in its wire form (as a JSON file of operations
// holds it); the server checks its fields.
func (t *Txn) Op(op api.TxnOp) *Txn { return t.add(op, &writeOptions{}) }

// Len returns the number of operations added so far.
func (t *Txn) Len() int { return len(t.ops) }

// Commit sends the transaction and returns its results, one per operation.
func (t *Txn) Commit(ctx context.Context) (*api.Txn, error) {
	if t.err != nil {
		return nil, t.err
	}
	req := api.TxnRequest{Ops: t.ops}
	cl := &call{method: "POST", path: "/v1/txn", policy: retryIfNotSent}
	if t.session != nil {
		req.SessionID, req.RequestSeq = t.session.id, t.session.nextSeq()
		cl.policy = retrySafe
		cl.idempotencyKey = t.session.id + "/" + strconv.FormatUint(req.RequestSeq, 10)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "encode transaction: %v", err)
	}
	var reply api.Txn
	var failed struct {
		FailedOp *int `json:"failed_op"`
	}
	cl.body, cl.out, cl.errOut = body, &reply, &failed
	err = t.client.do(ctx, cl)
	if t.session != nil {
		t.session.noteWriteError(err)
	}
	if err != nil {
		return nil, txnError(err, failed.FailedOp)
	}
	return &reply, nil
}

// txnError makes err, the error of a refused transaction, a TxnOpError
// when the reply named the operation at fault.
func txnError(err error, failedOp *int) error {
	var e *api.Error
	if failedOp == nil || !errors.As(err, &e) {
		return err
	}
	return &api.TxnOpError{Op: *failedOp, Err: e}
}

func (t *Txn) add(op api.TxnOp, o *writeOptions) *Txn {
	if err := api.ValidatePath(op.Path); err != nil && t.err == nil {
		t.err = err
	}
	if o.session != nil {
		t.fail("give the session with Txn.WithSession, not per operation")
	}
	if op.Ephemeral && t.session == nil {
		t.fail("an ephemeral create needs Txn.WithSession first")
	}
	t.ops = append(t.ops, op)
	return t
}

// version returns the version PrevVersion gave, or nil.
func (t *Txn) version(o *writeOptions, what string) *uint64 {
	switch o.prevVersion {
	case "", "any":
		return nil
	case "none":
		t.fail(what + " takes no PrevNone: only Check requires a node to be absent")
		return nil
	}
	n, _ := strconv.ParseUint(o.prevVersion, 10, 64) // written by PrevVersion
	if n == 0 {
		t.fail(what + " takes no PrevVersion(0): only Check requires a node to be absent")
		return nil
	}
	return &n
}

func (t *Txn) fail(message string) {
	if t.err == nil {
		t.err = api.Errorf(api.CodeInvalidArgument, "operation %d: %s", len(t.ops), message)
	}
}

// ReadMany reads several nodes (or, with Children set, children lists) at
// one index (docs/api.md POST /v1/read), linearizably unless Stale is
// given. Each read succeeds or fails on its own: see each result's Error.
func (c *Client) ReadMany(ctx context.Context, reads []api.ReadOp, opts ...ReadOption) (*api.ReadResults, error) {
	for i, read := range reads {
		if err := api.ValidatePath(read.Path); err != nil {
			var e *api.Error
			if !errors.As(err, &e) {
				return nil, err
			}
			return nil, &api.TxnOpError{Op: i, Err: e}
		}
	}
	body, err := json.Marshal(api.ReadRequest{Reads: reads})
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "encode reads: %v", err)
	}
	o := applyReadOptions(opts)
	var reply api.ReadResults
	cl := &call{method: "POST", path: "/v1/read", query: o.query(c.minIndex()), body: body, policy: retrySafe, out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &reply, nil
}
