package zkserver

import (
	"errors"
	"math"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// zkOp is one operation of a multi or multiRead request, as decoded.
type zkOp struct {
	op   zkproto.OpCode
	body zkproto.Record
}

// errBadMultiOp is a multi holding an operation its kind does not take.
var errBadMultiOp = errors.New("operation not allowed in this multi")

// decodeMulti decodes the body of a multi (reads false) or multiRead
// (reads true): operations, each after a MultiHeader, up to a done header.
func decodeMulti(buf []byte, reads bool) ([]zkOp, error) {
	r := zkproto.NewReader(buf)
	var ops []zkOp
	for {
		var h zkproto.MultiHeader
		h.Decode(r)
		if r.Err() != nil {
			return nil, r.Err()
		}
		if h.Done {
			break
		}
		if !allowedInMulti(h.Type, reads) {
			return nil, errBadMultiOp
		}
		body, _ := zkproto.NewRequestBody(h.Type)
		body.Decode(r)
		if r.Err() != nil {
			return nil, r.Err()
		}
		ops = append(ops, zkOp{op: h.Type, body: body})
	}
	r.End("multi")
	return ops, r.Err()
}

// allowedInMulti reports whether op may appear in a multi (writes and
// checks) or a multiRead (getData, getChildren).
func allowedInMulti(op zkproto.OpCode, reads bool) bool {
	if reads {
		return op == zkproto.OpGetData || op == zkproto.OpGetChildren
	}
	switch op {
	case zkproto.OpCreate, zkproto.OpCreate2, zkproto.OpCreateContainer, zkproto.OpCreateTTL,
		zkproto.OpDelete, zkproto.OpSetData, zkproto.OpCheck:
		return true
	}
	return false
}

// multiEntry is one result of a multi or multiRead reply: its header type
// and body (none for delete and check).
type multiEntry struct {
	op   zkproto.OpCode
	err  zkproto.ErrCode
	body zkproto.Record
}

// multiResponse is the reply body of multi and multiRead.
type multiResponse struct{ entries []multiEntry }

// Encode implements zkproto.Record: each result after its header, then
// the done header.
func (m *multiResponse) Encode(w *zkproto.Writer) {
	for _, e := range m.entries {
		h := zkproto.MultiHeader{Type: e.op, Err: e.err}
		h.Encode(w)
		if e.body != nil {
			e.body.Encode(w)
		}
	}
	done := zkproto.MultiHeader{Type: zkproto.OpError, Done: true, Err: -1}
	done.Encode(w)
}

// Decode implements zkproto.Record (replies are never decoded here).
func (m *multiResponse) Decode(*zkproto.Reader) {}

// opRole is what a latch transaction operation does for its ZooKeeper
// operation; it decides how a refusal maps onto ZooKeeper's codes.
type opRole uint8

const (
	roleParent   opRole = iota // a create's check that the parent exists
	roleCreate                 // the create itself
	roleDelete                 // a delete (after its version check, if any)
	roleVersion                // a set, a check, or a delete's version check
	roleSentinel               // always refused: a later operation failed validation
)

// txnPlan is a multi as one latch transaction. A ZooKeeper create is a
// check that the parent exists followed by the create, in the same
// transaction: the parent cannot vanish between them, so a create never
// makes a missing parent (latch's put would).
type txnPlan struct {
	ops   []server.TxnOp
	roles []opRole // the role of each latch operation
	// Per latch operation its ZooKeeper operation, and per ZooKeeper
	// operation the latch operation whose result it reports; not made
	// while implied: the plan holds ZooKeeper operation 0 alone (a
	// client's single write). zkOf and primaryOf read them.
	zkIndex []int
	primary []int
	implied bool // the lists are implied: one add of operation 0 so far
}

// zkOf returns the ZooKeeper operation of latch operation op.
func (p *txnPlan) zkOf(op int) int {
	if p.implied {
		return 0
	}
	return p.zkIndex[op]
}

// primaryOf returns the latch operation whose result ZooKeeper operation
// zk reports.
func (p *txnPlan) primaryOf(zk int) int {
	if p.implied {
		return len(p.ops) - 1
	}
	return p.primary[zk]
}

// add appends the latch operations of ZooKeeper operation zk. ops and
// roles become the plan's: the caller made them for it and changes them no
// more.
func (p *txnPlan) add(zk int, ops []server.TxnOp, roles []opRole) {
	if zk == 0 && p.zkIndex == nil && !p.implied {
		// Taken as they are (most plans have one ZooKeeper operation),
		// capped so that a later add copies them rather than writes past;
		// the index lists are implied until then.
		p.ops, p.roles = ops[:len(ops):len(ops)], roles[:len(roles):len(roles)]
		p.implied = true
		return
	}
	if p.implied {
		p.zkIndex = make([]int, len(p.ops), len(p.ops)+len(ops)) // all operation 0's
		p.primary = []int{len(p.ops) - 1}
		p.implied = false
	}
	p.ops = append(p.ops, ops...)
	p.roles = append(p.roles, roles...)
	for range ops {
		p.zkIndex = append(p.zkIndex, zk)
	}
	p.primary = append(p.primary, len(p.ops)-1)
}

// queuePlace reports whether the plan is one ZooKeeper create of an
// ephemeral sequential node: the place a lock or election recipe takes in
// its queue (server.TxnRequest.Place). A multi never asks (multi does not
// call runPlan).
func (p *txnPlan) queuePlace() bool {
	if !p.implied {
		return false // none, or several ZooKeeper operations
	}
	for _, op := range p.ops {
		if op.Kind == server.TxnCreate && op.Ephemeral && op.Sequential {
			return true
		}
	}
	return false
}

// sentinelOp is a check that always fails: the root always exists.
var sentinelOp = server.TxnOp{Kind: server.TxnCheck, Path: "/", Precondition: server.NoNode}

// multi serves multi (14) as one latch transaction, all or nothing, and
// replies as ZooKeeper does: on success a result per operation; on a
// refusal, per operation the code of the one that failed, OK (0) for the
// ones before it and RuntimeInconsistency (-2) for the ones after, with
// the reply header's err 0 (as ZooKeeper 3.8 sends it).
func (c *conn) multi(buf []byte) (zkproto.Record, zkproto.ErrCode) {
	ops, err := decodeMulti(buf, false)
	if err != nil {
		c.l.log.Debug("zk: bad multi", "session", c.session, "err", err)
		return nil, zkproto.ErrMarshallingError
	}
	if len(ops) == 0 {
		return &multiResponse{}, zkproto.ErrOK
	}
	var plan txnPlan
	for i, op := range ops {
		latchOps, roles, code := c.planOp(op)
		if code != zkproto.ErrOK {
			// ZooKeeper reports the first operation that fails, in order:
			// an earlier one refused by the state takes precedence, so
			// the operations before this one run (never applied) ahead of
			// a check that always fails.
			return c.multiRefusedAt(&plan, i, code, len(ops))
		}
		plan.add(i, latchOps, roles)
	}
	timeMs := c.l.srv.WallTimeMs()
	res, err := c.l.srv.Txn(c.requestContext(), server.TxnRequest{Ops: plan.ops, SessionID: c.session, TimeMs: timeMs})
	if err != nil {
		return c.multiFailed(&plan, ops, err)
	}
	c.sawState(res.Index)
	entries := make([]multiEntry, len(ops))
	for i, op := range ops {
		entries[i] = c.multiResult(op.op, res.Ops[plan.primaryOf(i)], timeMs)
	}
	return &multiResponse{entries: entries}, zkproto.ErrOK
}

// multiRefusedAt answers a multi whose operation at failed validation with
// code, unless one of the operations before it is refused by the state.
func (c *conn) multiRefusedAt(plan *txnPlan, at int, code zkproto.ErrCode, n int) (zkproto.Record, zkproto.ErrCode) {
	if len(plan.ops) > 0 {
		plan.add(at, []server.TxnOp{sentinelOp}, []opRole{roleSentinel})
		_, err := c.l.srv.Txn(c.requestContext(), server.TxnRequest{Ops: plan.ops, SessionID: c.session})
		var opErr *api.TxnOpError
		if !errors.As(err, &opErr) {
			return nil, errCode(err)
		}
		if plan.roles[opErr.Op] != roleSentinel {
			failed := plan.zkOf(opErr.Op)
			return failedMulti(n, failed, c.classify(plan, opErr)), zkproto.ErrOK
		}
	}
	return failedMulti(n, at, code), zkproto.ErrOK
}

// multiFailed answers a multi whose transaction was refused.
func (c *conn) multiFailed(plan *txnPlan, ops []zkOp, err error) (zkproto.Record, zkproto.ErrCode) {
	var opErr *api.TxnOpError
	if !errors.As(err, &opErr) || opErr.Op < 0 || opErr.Op >= len(plan.ops) {
		return nil, errCode(err) // not one operation's fault: timeout, expired session, too large
	}
	c.sawRefusal()
	return failedMulti(len(ops), plan.zkOf(opErr.Op), c.classify(plan, opErr)), zkproto.ErrOK
}

// failedMulti is the reply of n operations the one at failed refused with
// code: OK before it, RuntimeInconsistency after it.
func failedMulti(n, failed int, code zkproto.ErrCode) *multiResponse {
	entries := make([]multiEntry, n)
	for i := range entries {
		e := zkproto.ErrOK
		switch {
		case i == failed:
			e = code
		case i > failed:
			e = zkproto.ErrRuntimeInconsistency
		}
		entries[i] = multiEntry{op: zkproto.OpError, err: e, body: &zkproto.ErrorResponse{Err: e}}
	}
	return &multiResponse{entries: entries}
}

// classify maps the refusal of a latch operation of plan onto the code of
// its ZooKeeper operation.
func (c *conn) classify(plan *txnPlan, opErr *api.TxnOpError) zkproto.ErrCode {
	op := plan.ops[opErr.Op]
	switch code := opErr.Err.Code; {
	case code == api.CodeNotFound:
		return zkproto.ErrNoNode
	case plan.roles[opErr.Op] == roleCreate && code == api.CodePreconditionFailed:
		return zkproto.ErrNodeExists
	case plan.roles[opErr.Op] == roleCreate && code == api.CodeInvalidArgument:
		return c.classifyCreate(plan, opErr.Op)
	case plan.roles[opErr.Op] == roleDelete && code == api.CodePreconditionFailed:
		// The version was checked before: the node has children, or is
		// another session's ephemeral node (which has none).
		if n, err := c.readNode(nil, op.Path, false); err == nil && n.Owner != 0 && n.Owner != c.session {
			return zkproto.ErrNoAuth
		}
		return zkproto.ErrNotEmpty
	}
	return errCode(opErr.Err)
}

// classifyCreate says why the create at index k of plan was refused as
// invalid: its parent is ephemeral (made before the multi, or by an earlier
// operation of it), or something else about it is.
func (c *conn) classifyCreate(plan *txnPlan, k int) zkproto.ErrCode {
	parent := api.Parent(plan.ops[k].Path)
	for _, earlier := range plan.ops[:k] {
		if earlier.Kind == server.TxnCreate && earlier.Path == parent && earlier.Ephemeral {
			return zkproto.ErrNoChildrenForEphemerals
		}
	}
	if c.ephemeralNode(parent) {
		return zkproto.ErrNoChildrenForEphemerals
	}
	return zkproto.ErrBadArguments
}

// ephemeralNode reports whether path is, as read now, an ephemeral node.
func (c *conn) ephemeralNode(path string) bool {
	n, err := c.readNode(nil, path, false)
	return err == nil && n.Owner != 0
}

// multiResult is the reply entry of a ZooKeeper operation applied with
// result r, of a transaction stamped with timeMs.
func (c *conn) multiResult(op zkproto.OpCode, r server.TxnOpResult, timeMs uint64) multiEntry {
	switch op {
	case zkproto.OpCreate:
		return multiEntry{op: op, body: &zkproto.CreateResponse{Path: r.Path}}
	case zkproto.OpCreate2, zkproto.OpCreateContainer:
		return multiEntry{op: zkproto.OpCreate2, body: &zkproto.Create2Response{Path: r.Path, Stat: c.txnStat(r, timeMs)}}
	case zkproto.OpSetData:
		return multiEntry{op: op, body: &zkproto.StatResponse{Stat: c.txnStat(r, timeMs)}}
	}
	return multiEntry{op: op} // delete, check: no body
}

// txnStat is the Stat of the node a transaction operation left, in a
// transaction stamped with timeMs (TxnRequest.TimeMs): its mtime.
func (c *conn) txnStat(r server.TxnOpResult, timeMs uint64) zkproto.Stat {
	stat := c.statOf(server.NodeView{
		Version: r.Version, CreatedIndex: r.CreatedIndex, ModifiedIndex: r.ModifiedIndex, Owner: r.Owner,
		ChildrenCount: r.ChildrenCount, CreatedAtMs: r.CreatedAtMs, ModifiedAtMs: timeMs,
		ChildrenVersion: r.ChildrenVersion, ChildrenModifiedIndex: r.ChildrenModifiedIndex,
	})
	stat.DataLength = int32(r.DataLength)
	return stat
}

// planOp returns the latch operations of one ZooKeeper write of a multi,
// or the code refusing it before it reaches the log.
func (c *conn) planOp(op zkOp) ([]server.TxnOp, []opRole, zkproto.ErrCode) {
	switch req := op.body.(type) {
	case *zkproto.CreateRequest:
		return planCreate(req)
	case *zkproto.CreateTTLRequest:
		return nil, nil, zkproto.ErrUnimplemented
	case *zkproto.DeleteRequest:
		return planDelete(req)
	case *zkproto.SetDataRequest:
		if !validWritePath(req.Path) {
			return nil, nil, zkproto.ErrBadArguments
		}
		pre, version := versionCondition(req.Version)
		return []server.TxnOp{{Kind: server.TxnSet, Path: req.Path, Value: req.Data, Precondition: pre, Version: version}},
			[]opRole{roleVersion}, zkproto.ErrOK
	case *zkproto.CheckVersionRequest:
		if !validWritePath(req.Path) {
			return nil, nil, zkproto.ErrBadArguments
		}
		pre, version := versionCondition(req.Version)
		return []server.TxnOp{{Kind: server.TxnCheck, Path: req.Path, Precondition: pre, Version: version}},
			[]opRole{roleVersion}, zkproto.ErrOK
	}
	return nil, nil, zkproto.ErrBadArguments
}

// versionCondition is the precondition of a ZooKeeper version: -1 any,
// another negative one never met (ZooKeeper: BadVersion).
func versionCondition(v int32) (server.Precondition, uint64) {
	switch {
	case v == -1:
		return server.AnyVersion, 0
	case v < 0:
		return server.AtVersion, math.MaxUint64
	}
	return server.AtVersion, latchVersion(v)
}

// planCreate returns a create as a check that its parent exists and the
// create, or the code refusing it.
func planCreate(req *zkproto.CreateRequest) ([]server.TxnOp, []opRole, zkproto.ErrCode) {
	ephemeral, sequential, code := createMode(req)
	if code != zkproto.ErrOK {
		return nil, nil, code
	}
	return []server.TxnOp{
			{Kind: server.TxnCheck, Path: api.Parent(req.Path), Precondition: server.AnyVersion},
			{Kind: server.TxnCreate, Path: req.Path, Value: req.Data, Ephemeral: ephemeral, Sequential: sequential},
		},
		[]opRole{roleParent, roleCreate}, zkproto.ErrOK
}

// createMode validates a create request and returns its mode.
func createMode(req *zkproto.CreateRequest) (ephemeral, sequential bool, code zkproto.ErrCode) {
	mode := zkproto.CreateMode(req.Flags)
	switch mode {
	case zkproto.ModePersistent, zkproto.ModeEphemeral, zkproto.ModePersistentSequential, zkproto.ModeEphemeralSequential:
	case zkproto.ModeContainer: // kept as a persistent node: docs/zookeeper.md
	case zkproto.ModePersistentWithTTL, zkproto.ModePersistentSequentialWithTTL:
		return false, false, zkproto.ErrUnimplemented
	default:
		return false, false, zkproto.ErrBadArguments
	}
	if len(req.ACL) == 0 {
		return false, false, zkproto.ErrInvalidACL
	}
	if req.Path == "/" {
		return false, false, zkproto.ErrNodeExists
	}
	if !validWritePath(req.Path) {
		return false, false, zkproto.ErrBadArguments
	}
	ephemeral = mode == zkproto.ModeEphemeral || mode == zkproto.ModeEphemeralSequential
	sequential = mode == zkproto.ModePersistentSequential || mode == zkproto.ModeEphemeralSequential
	return ephemeral, sequential, zkproto.ErrOK
}

// planDelete returns a delete as its version check (if it has a version)
// and the delete.
func planDelete(req *zkproto.DeleteRequest) ([]server.TxnOp, []opRole, zkproto.ErrCode) {
	if req.Path == "/" || !validWritePath(req.Path) {
		return nil, nil, zkproto.ErrBadArguments
	}
	del := server.TxnOp{Kind: server.TxnDelete, Path: req.Path, Precondition: server.AnyVersion}
	if req.Version == -1 {
		return []server.TxnOp{del}, []opRole{roleDelete}, zkproto.ErrOK
	}
	pre, version := versionCondition(req.Version)
	check := server.TxnOp{Kind: server.TxnCheck, Path: req.Path, Precondition: pre, Version: version}
	return []server.TxnOp{check, del}, []opRole{roleVersion, roleDelete}, zkproto.ErrOK
}

// multiRead serves multiRead (22) onto one read of several nodes at one
// index: each read succeeds or fails on its own (a failure is an error
// entry), and none sets a watch (as in ZooKeeper).
func (c *conn) multiRead(buf []byte) (zkproto.Record, zkproto.ErrCode) {
	ops, err := decodeMulti(buf, true)
	if err != nil {
		c.l.log.Debug("zk: bad multiRead", "session", c.session, "err", err)
		return nil, zkproto.ErrMarshallingError
	}
	if len(ops) == 0 {
		return &multiResponse{}, zkproto.ErrOK
	}
	reads := make([]server.ReadOp, len(ops))
	for i, op := range ops {
		reads[i] = server.ReadOp{Path: op.body.(*zkproto.PathWatchRequest).Path, Children: op.op == zkproto.OpGetChildren}
	}
	res, err := c.l.srv.ReadMany(c.requestContext(), reads, c.readOptions())
	if err != nil {
		return nil, errCode(err)
	}
	c.sawState(res.Index)
	entries := make([]multiEntry, len(ops))
	for i, op := range ops {
		entries[i] = c.readEntry(op.op, res.Results[i])
	}
	return &multiResponse{entries: entries}, zkproto.ErrOK
}

// readEntry is the reply entry of one read of a multiRead.
func (c *conn) readEntry(op zkproto.OpCode, r server.ReadResult) multiEntry {
	if r.Err != nil {
		code := errCode(r.Err)
		return multiEntry{op: zkproto.OpError, err: code, body: &zkproto.ErrorResponse{Err: code}}
	}
	if op == zkproto.OpGetChildren {
		return multiEntry{op: op, body: &zkproto.GetChildrenResponse{Children: r.Children}}
	}
	n, data := r.Node, []byte(r.Node.Value)
	stat := c.statOf(server.NodeView{
		Version: n.Version, CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex,
		Owner: r.Owner, ChildrenCount: n.ChildrenCount, Value: data,
		CreatedAtMs: n.CreatedAtMs, ModifiedAtMs: n.ModifiedAtMs,
		ChildrenVersion: n.ChildrenVersion, ChildrenModifiedIndex: r.ChildrenModifiedIndex,
	})
	return multiEntry{op: op, body: &zkproto.GetDataResponse{Data: data, Stat: stat}}
}
