package zkserver

import (
	"errors"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// orderedWrite serves a create, delete or setData of request p on a
// cluster of one shard, where writes are pipelined (pipeline.go): as the
// one-operation transaction a multi of it would be (multi.go's plan: a
// create checks its parent, a delete or set its version), proposed in p's
// turn of the connection's write stream. Its reply is built from the
// transaction's result alone, never from a read before it: a read would
// not see the writes before it still in flight.
func (c *conn) orderedWrite(p *pending, op zkproto.OpCode, body zkproto.Record) (zkproto.Record, zkproto.ErrCode) {
	if op == zkproto.OpDeleteContainer {
		return nil, zkproto.ErrUnimplemented // as a plain write: docs/zookeeper.md
	}
	ops, roles, code := c.planOp(zkOp{op: op, body: body})
	if code != zkproto.ErrOK {
		return nil, code
	}
	var plan txnPlan
	plan.add(0, ops, roles)
	if h := c.l.beforeWrite.Load(); h != nil {
		(*h)(p.h.Xid, p.turn)
	}
	res, timeMs, code := c.runPlan(&plan, p.turn)
	if code != zkproto.ErrOK {
		return nil, code
	}
	return c.multiResult(op, res.Ops[plan.primaryOf(0)], timeMs).body, zkproto.ErrOK
}

// runPlan proposes plan as one transaction of the connection's session,
// stamped with this member's wall time (returned with the result), in turn
// of the connection's write stream when turn is not nil; a create of an
// ephemeral sequential node is marked as a queue place (it may be proposed
// deferred: server.TxnRequest.Place). An operation's
// refusal is classified as ZooKeeper's error of that operation; any other
// failure (unavailable: an unknown outcome, or a write out of its stream's
// order; an expired session) is errCode's, which ends the connection
// unanswered where reply says so.
func (c *conn) runPlan(plan *txnPlan, turn *server.WriteTurn) (server.TxnResult, uint64, zkproto.ErrCode) {
	timeMs := c.l.srv.WallTimeMs()
	res, err := c.l.srv.Txn(c.requestContext(), server.TxnRequest{Ops: plan.ops, SessionID: c.session, TimeMs: timeMs, Turn: turn, Place: plan.queuePlace()})
	if err != nil {
		var opErr *api.TxnOpError
		if errors.As(err, &opErr) && opErr.Op >= 0 && opErr.Op < len(plan.ops) {
			c.sawRefusal()
			return server.TxnResult{}, timeMs, c.classify(plan, opErr)
		}
		return server.TxnResult{}, timeMs, errCode(err)
	}
	c.sawState(res.Index)
	return res, timeMs, zkproto.ErrOK
}
