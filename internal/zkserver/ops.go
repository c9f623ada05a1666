package zkserver

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// multiOp serves multi or multiRead from the bytes after the header.
func (c *conn) multiOp(op zkproto.OpCode, rest []byte) (zkproto.Record, zkproto.ErrCode, bool) {
	if op == zkproto.OpMulti {
		resp, code := c.multi(rest)
		return resp, code, false
	}
	resp, code := c.multiRead(rest)
	return resp, code, false
}

// reply sends the answer to the request h and reports whether the
// connection must end after it. If the request set watches (holds), their
// held notifications are released right after the reply, under the watch
// table's lock (watchTable.release), so that no notification of a later
// change goes out between the reply and a held one of an earlier change.
// The reply carries at least floor (pending.floor), and no zxid past a
// notification the connection owes (conn.zxidLocked).
func (c *conn) reply(h zkproto.RequestHeader, resp zkproto.Record, code zkproto.ErrCode, end bool, holds []*watchGen, floor uint64, batch bool) (closeConn bool) {
	if code == zkproto.ErrOperationTimeout {
		// The member could not answer in time (no leader, no quorum): end
		// the connection unanswered, as a ZooKeeper server that lost its
		// quorum does. The client sees ConnectionLoss, reconnects (here or
		// elsewhere) with its session, and its recipes recover as they do
		// from ZooKeeper; a write's outcome is then unknown to it, as there.
		c.l.log.Info("zk: request timed out; closing the connection", "session", c.session, "op", h.Type)
		c.watches.release(holds, nil, nil)
		return true
	}
	if batch && len(holds) > 0 {
		// Waiting for notifications or the watch table may take a while:
		// the replies before this one do not wait with it.
		c.flush()
	}
	if hook := c.l.replyHook.Load(); hook != nil {
		(*hook)(h.Type, false)
	}
	through := c.awaitNotifications(len(holds) > 0)
	if hook := c.l.replyHook.Load(); hook != nil {
		(*hook)(h.Type, true)
	}
	if len(holds) == 0 {
		// With batch, whoever answers next flushes it (the sender in
		// nextDone, the reader in run, or answer before it ends the
		// connection).
		_ = c.sendFrame(zkproto.ReplyHeader{Xid: h.Xid, Zxid: int64(floor), Err: code}, resp, !batch)
	} else {
		// release may send it later from another goroutine: flushed.
		send := func() { _ = c.send(zkproto.ReplyHeader{Xid: h.Xid, Zxid: int64(floor), Err: code}, resp) }
		c.watches.release(holds, through, send)
	}
	return end || code == zkproto.ErrSessionExpired
}

// dispatch runs one decoded request.
func (c *conn) dispatch(p *pending) (zkproto.Record, zkproto.ErrCode, bool) {
	h, body := p.h, p.body
	switch h.Type {
	case zkproto.OpPing:
		return nil, c.ping(), false
	case zkproto.OpCloseSession:
		return c.closeSession()
	case zkproto.OpWhoAmI:
		return c.whoAmI(), zkproto.ErrOK, false
	case zkproto.OpAuth:
		return c.auth(body.(*zkproto.AuthPacket))
	}
	if body == nil {
		// multi, multiRead, reconfig, sasl, createSession after the
		// handshake, and any opcode latch does not know.
		return nil, zkproto.ErrUnimplemented, false
	}
	resp, code := c.operation(p, h.Type, body)
	return resp, code, false
}

// operation runs request p, opcode op with a body.
func (c *conn) operation(p *pending, op zkproto.OpCode, body zkproto.Record) (zkproto.Record, zkproto.ErrCode) {
	if c.writes != nil && p.class == classWrite {
		return c.orderedWrite(p, op, body)
	}
	switch req := body.(type) {
	case *zkproto.CreateRequest:
		return c.create(op, req)
	case *zkproto.CreateTTLRequest:
		return nil, zkproto.ErrUnimplemented
	case *zkproto.DeleteRequest:
		if op == zkproto.OpDeleteContainer {
			return nil, zkproto.ErrUnimplemented
		}
		return c.delete(req)
	case *zkproto.PathWatchRequest:
		return c.read(p, op, req)
	case *zkproto.SetDataRequest:
		return c.setData(req)
	case *zkproto.PathRequest:
		return c.pathOp(p, op, req.Path)
	case *zkproto.SetACLRequest:
		return c.setACL(p, req)
	case *zkproto.CheckVersionRequest:
		return c.check(p, req)
	case *zkproto.PathTypeRequest:
		return c.watchOp(p, op, req)
	case *zkproto.SetWatches:
		return nil, c.setWatches(p, req)
	}
	return nil, zkproto.ErrUnimplemented
}

// readOptions is how fresh a read on this connection must be: at least
// what the client has seen, from this member's state. With several shards
// each shard has its own log, and an index the connection saw in one says
// nothing of another's: there reads are linearizable, which is stronger.
func (c *conn) readOptions() server.ReadOptions {
	if c.l.sharded {
		return server.ReadOptions{Consistency: api.Linearizable}
	}
	return server.ReadOptions{Consistency: api.Stale, MinIndex: c.seen.Load()}
}

// readNode reads path at the connection's read options, for request p
// (nil for a write: see readInOrder).
func (c *conn) readNode(p *pending, path string, children bool) (server.NodeView, error) {
	var n server.NodeView
	err := c.readInOrder(p, func(opts server.ReadOptions) (uint64, error) {
		var err error
		n, err = c.l.srv.ReadNode(c.requestContext(), path, server.NodeReadOptions{ReadOptions: opts, Children: children})
		return n.Index, err // also on not_found: the index of the view that lacked the node
	})
	return n, err
}

// readInOrder runs read, which reads at the options it is given and
// returns the index it saw, for request p, so that p never sees an older
// state than the requests of the connection before it, though reads run
// concurrently: once the read before p (in request order) is done, a read
// that saw less than the connection has seen reads again from there (a
// local read, the member has applied it). A write (p nil) runs after every
// earlier request anyway.
func (c *conn) readInOrder(p *pending, read func(server.ReadOptions) (uint64, error)) error {
	if h := c.l.beforeRead.Load(); h != nil && p != nil {
		(*h)()
	}
	index, err := read(c.readOptions())
	if p != nil && p.prevRead != nil {
		<-p.prevRead.done
		if seen := c.seen.Load(); index < seen && !c.l.sharded {
			index, err = read(server.ReadOptions{Consistency: api.Stale, MinIndex: seen})
		}
	}
	c.sawState(index)
	return err
}

// ping keeps the session alive and answers.
func (c *conn) ping() zkproto.ErrCode {
	if c.isReady() && !c.heartbeat() {
		return zkproto.ErrSessionExpired
	}
	return zkproto.ErrOK
}

// closeSession ends the session (its ephemeral nodes go) and the connection.
func (c *conn) closeSession() (zkproto.Record, zkproto.ErrCode, bool) {
	c.closing.Store(true) // the reply goes out before the connection closes
	if c.unborn {
		return nil, zkproto.ErrOK, true // never created: nothing to end
	}
	closed, err := c.l.srv.CloseSession(c.requestContext(), c.session)
	if err != nil && !isCode(err, api.CodeSessionExpired) && !isCode(err, api.CodeNotFound) {
		return nil, errCode(err), true
	}
	c.sawState(closed.Index)
	return nil, zkproto.ErrOK, true
}

// create serves create, create2 and createContainer: a check that the
// parent exists and the create, in one transaction, so that a parent
// deleted meanwhile is never made again by the create (latch's put would
// make it).
func (c *conn) create(op zkproto.OpCode, req *zkproto.CreateRequest) (zkproto.Record, zkproto.ErrCode) {
	if c.l.sharded {
		return c.createSharded(op, req)
	}
	ops, roles, code := planCreate(req)
	if code != zkproto.ErrOK {
		return nil, code
	}
	plan := txnPlan{}
	plan.add(0, ops, roles)
	res, timeMs, code := c.runPlan(&plan, nil)
	if code != zkproto.ErrOK {
		return nil, code
	}
	created := res.Ops[plan.primaryOf(0)]
	if op == zkproto.OpCreate {
		return &zkproto.CreateResponse{Path: created.Path}, zkproto.ErrOK
	}
	return &zkproto.Create2Response{Path: created.Path, Stat: c.txnStat(created, timeMs)}, zkproto.ErrOK
}

// createSharded serves a create on a cluster of several shards, where a
// node and its parent may live in different shards and so cannot share a
// transaction: a put that must not find the node, with the server's exact
// parent rule (the sharded write path checks the parent in its shard and
// refuses a missing one, never making it).
func (c *conn) createSharded(op zkproto.OpCode, req *zkproto.CreateRequest) (zkproto.Record, zkproto.ErrCode) {
	ephemeral, sequential, code := createMode(req)
	if code != zkproto.ErrOK {
		return nil, code
	}
	timeMs := c.l.srv.WallTimeMs()
	put, err := c.l.srv.Put(c.requestContext(), server.PutRequest{
		Path: req.Path, Value: req.Data, Precondition: server.NoNode, Ephemeral: ephemeral, Sequential: sequential,
		SessionID: c.session, TimeMs: timeMs, ExactParent: true,
	})
	if err != nil {
		return nil, c.classifyShardedCreate(req.Path, err)
	}
	c.sawState(put.Index)
	if op == zkproto.OpCreate {
		return &zkproto.CreateResponse{Path: put.Path}, zkproto.ErrOK
	}
	created := server.TxnOpResult{Path: put.Path, Version: put.Version, CreatedIndex: put.CreatedIndex,
		ModifiedIndex: put.ModifiedIndex, DataLength: len(req.Data)}
	if ephemeral {
		created.Owner = c.session
	}
	return &zkproto.Create2Response{Path: put.Path, Stat: c.txnStat(created, timeMs)}, zkproto.ErrOK
}

// classifyShardedCreate maps the refusal of a sharded create onto ZooKeeper's
// codes: the node exists, the parent is missing, or the parent is
// ephemeral (an invalid_argument of the server).
func (c *conn) classifyShardedCreate(path string, err error) zkproto.ErrCode {
	switch {
	case isCode(err, api.CodePreconditionFailed):
		return zkproto.ErrNodeExists
	case isCode(err, api.CodeInvalidArgument) && c.ephemeralNode(api.Parent(path)):
		return zkproto.ErrNoChildrenForEphemerals
	}
	return errCode(err)
}

// delete serves delete. latch refuses to delete another session's
// ephemeral node, reported as NoAuth.
func (c *conn) delete(req *zkproto.DeleteRequest) (zkproto.Record, zkproto.ErrCode) {
	if !validWritePath(req.Path) || req.Path == "/" {
		return nil, zkproto.ErrBadArguments
	}
	dr := server.DeleteRequest{Path: req.Path, SessionID: c.session}
	if req.Version != -1 {
		if req.Version < 0 {
			return nil, c.classifyDelete(req)
		}
		dr.Precondition, dr.Version = server.AtVersion, latchVersion(req.Version)
	}
	deleted, err := c.l.srv.Delete(c.requestContext(), dr)
	if isCode(err, api.CodePreconditionFailed) {
		return nil, c.classifyDelete(req)
	}
	if err != nil {
		return nil, errCode(err)
	}
	c.sawState(deleted.Index)
	return nil, zkproto.ErrOK
}

// classifyDelete says why a delete was refused, from the node as it is now.
func (c *conn) classifyDelete(req *zkproto.DeleteRequest) zkproto.ErrCode {
	n, err := c.readNode(nil, req.Path, false)
	switch {
	case err != nil:
		return errCode(err)
	case req.Version != -1 && zkVersion(n.Version) != req.Version:
		return zkproto.ErrBadVersion
	case n.ChildrenCount > 0:
		return zkproto.ErrNotEmpty
	case n.Owner != 0 && n.Owner != c.session:
		return zkproto.ErrNoAuth
	}
	// Changed again since the refusal: report the version conflict.
	return zkproto.ErrBadVersion
}

// read serves exists, getData, getChildren and getChildren2, setting the
// watch first when asked, so that no change after the read is missed. The
// watch's notifications wait for p's reply (watchGen).
func (c *conn) read(p *pending, op zkproto.OpCode, req *zkproto.PathWatchRequest) (zkproto.Record, zkproto.ErrCode) {
	if err := api.ValidatePath(req.Path); err != nil {
		return nil, zkproto.ErrBadArguments
	}
	kind := kindData
	if op == zkproto.OpGetChildren || op == zkproto.OpGetChildren2 {
		kind = kindChild
	}
	var entry *watchGen
	if req.Watch {
		var err error
		if entry, err = c.watches.prepare(c.requestContext(), req.Path, kind, 0, true); err != nil {
			return nil, errCode(err)
		}
		p.hold(entry)
	}
	n, err := c.readNode(p, req.Path, kind == kindChild)
	if err != nil {
		if op == zkproto.OpExists && isCode(err, api.CodeNotFound) {
			// exists on a missing node still sets its watch.
			c.watches.armAs(entry, kindExist, shardPos{index: n.Index})
		} else {
			c.watches.drop(entry)
		}
		return nil, errCode(err)
	}
	if entry != nil {
		c.watches.arm(entry, posOf(n.Index, c.l.srv.ChildShardOf(req.Path), n.ChildrenIndex))
	}
	stat := c.statOf(n)
	switch op {
	case zkproto.OpExists:
		return &zkproto.StatResponse{Stat: stat}, zkproto.ErrOK
	case zkproto.OpGetData:
		// latch does not tell an empty value from none: both go as an empty
		// buffer, never as jute's null (length -1), which some clients
		// (kazoo's recipes) do not expect for a node they created empty.
		return &zkproto.GetDataResponse{Data: nonNil(n.Value), Stat: stat}, zkproto.ErrOK
	case zkproto.OpGetChildren:
		return &zkproto.GetChildrenResponse{Children: n.Children}, zkproto.ErrOK
	}
	return &zkproto.GetChildren2Response{Children: n.Children, Stat: stat}, zkproto.ErrOK
}

// setData serves setData. With version -1 it is first a compare-and-set
// at the version read (latch's put would make a missing node; this one
// never does); if another writer won the race, an unconditional set of
// the existing node (a one-operation transaction), which never fails for
// a version, as ZooKeeper's does not.
func (c *conn) setData(req *zkproto.SetDataRequest) (zkproto.Record, zkproto.ErrCode) {
	if !validWritePath(req.Path) {
		return nil, zkproto.ErrBadArguments
	}
	n, err := c.readNode(nil, req.Path, false)
	if err != nil {
		return nil, errCode(err)
	}
	expected := n.Version
	if req.Version != -1 {
		if zkVersion(n.Version) != req.Version {
			return nil, zkproto.ErrBadVersion
		}
		expected = latchVersion(req.Version)
	}
	timeMs := c.l.srv.WallTimeMs()
	put, err := c.l.srv.Put(c.requestContext(), server.PutRequest{
		Path: req.Path, Value: req.Data, Precondition: server.AtVersion, Version: expected, SessionID: c.session, TimeMs: timeMs,
	})
	if err == nil {
		c.sawState(put.Index)
		n.Value, n.Version, n.ModifiedIndex, n.ModifiedAtMs = req.Data, put.Version, put.ModifiedIndex, timeMs
		return &zkproto.StatResponse{Stat: c.statOf(n)}, zkproto.ErrOK
	}
	if req.Version != -1 || !isCode(err, api.CodePreconditionFailed) {
		return nil, errCode(err)
	}
	res, err := c.l.srv.Txn(c.requestContext(), server.TxnRequest{
		Ops:       []server.TxnOp{{Kind: server.TxnSet, Path: req.Path, Value: req.Data, Precondition: server.AnyVersion}},
		SessionID: c.session, TimeMs: timeMs,
	})
	if err != nil {
		return nil, errCode(err)
	}
	c.sawState(res.Index)
	set := res.Ops[0]
	n.Value, n.Version, n.ModifiedIndex, n.ModifiedAtMs = req.Data, set.Version, set.ModifiedIndex, timeMs
	n.ChildrenCount, n.ChildrenVersion, n.ChildrenModifiedIndex = set.ChildrenCount, set.ChildrenVersion, set.ChildrenModifiedIndex
	return &zkproto.StatResponse{Stat: c.statOf(n)}, zkproto.ErrOK
}

// pathOp serves the requests whose body is a path alone.
func (c *conn) pathOp(p *pending, op zkproto.OpCode, path string) (zkproto.Record, zkproto.ErrCode) {
	if op == zkproto.OpGetEphemerals {
		return c.ephemerals(p, path)
	}
	if err := api.ValidatePath(path); err != nil {
		return nil, zkproto.ErrBadArguments
	}
	switch op {
	case zkproto.OpSync:
		return c.sync(path)
	case zkproto.OpGetACL:
		return c.getACL(p, path)
	case zkproto.OpGetAllChildrenNumber:
		var count int
		err := c.readInOrder(p, func(opts server.ReadOptions) (index uint64, err error) {
			count, index, err = c.l.srv.CountDescendants(c.requestContext(), path, opts)
			return index, err
		})
		if err != nil {
			return nil, errCode(err)
		}
		return &zkproto.IntResponse{Value: int32(min(count, 1<<31-1))}, zkproto.ErrOK
	}
	return nil, zkproto.ErrUnimplemented
}

// sync makes every later read of the connection linearizable from here:
// it waits for a linearizable barrier and raises the connection's floor to
// its index.
func (c *conn) sync(path string) (zkproto.Record, zkproto.ErrCode) {
	index, err := c.l.srv.Sync(c.requestContext(), path)
	if err != nil {
		return nil, errCode(err)
	}
	c.sawState(index)
	return &zkproto.PathRequest{Path: path}, zkproto.ErrOK
}

// ephemerals serves getEphemerals: the session's ephemeral nodes whose
// path starts with prefix ("/" or "": all).
func (c *conn) ephemerals(p *pending, prefix string) (zkproto.Record, zkproto.ErrCode) {
	var paths []string
	err := c.readInOrder(p, func(opts server.ReadOptions) (index uint64, err error) {
		paths, index, err = c.l.srv.SessionEphemerals(c.requestContext(), c.session, prefix, opts)
		return index, err
	})
	if err != nil {
		return nil, errCode(err)
	}
	return &zkproto.GetChildrenResponse{Children: paths}, zkproto.ErrOK
}

// setACL, with auth disabled, accepts any non-empty ACL and reports it
// set (nodes stay world:anyone). With auth enabled it needs admin on the
// path (else NoAuth) and is refused with InvalidACL: access is granted
// with latch's roles, never per node, and reporting an ACL set that
// latch does not enforce would mislead.
func (c *conn) setACL(p *pending, req *zkproto.SetACLRequest) (zkproto.Record, zkproto.ErrCode) {
	if err := api.ValidatePath(req.Path); err != nil {
		return nil, zkproto.ErrBadArguments
	}
	if len(req.ACL) == 0 {
		return nil, zkproto.ErrInvalidACL
	}
	if c.l.srv.AuthEnabled() {
		if err := c.l.srv.AuthorizeAdmin(c.requestContext(), req.Path); err != nil {
			return nil, errCode(err)
		}
		return nil, zkproto.ErrInvalidACL
	}
	n, err := c.readNode(p, req.Path, false)
	if err != nil {
		return nil, errCode(err)
	}
	if req.Version != -1 && req.Version != 0 {
		return nil, zkproto.ErrBadVersion
	}
	return &zkproto.StatResponse{Stat: c.statOf(n)}, zkproto.ErrOK
}

// check serves a standalone version check.
func (c *conn) check(p *pending, req *zkproto.CheckVersionRequest) (zkproto.Record, zkproto.ErrCode) {
	if !validWritePath(req.Path) {
		return nil, zkproto.ErrBadArguments
	}
	n, err := c.readNode(p, req.Path, false)
	if err != nil {
		return nil, errCode(err)
	}
	if req.Version != -1 && zkVersion(n.Version) != req.Version {
		return nil, zkproto.ErrBadVersion
	}
	return nil, zkproto.ErrOK
}

// watchOp serves checkWatches, removeWatches and addWatch.
func (c *conn) watchOp(p *pending, op zkproto.OpCode, req *zkproto.PathTypeRequest) (zkproto.Record, zkproto.ErrCode) {
	if !validWatchType(op, req.Type) {
		return nil, zkproto.ErrMarshallingError
	}
	if err := api.ValidatePath(req.Path); err != nil {
		return nil, zkproto.ErrBadArguments
	}
	switch op {
	case zkproto.OpCheckWatches:
		if c.watches.has(req.Path, req.Type) {
			return nil, zkproto.ErrOK
		}
		return nil, zkproto.ErrNoWatcher
	case zkproto.OpRemoveWatches:
		if c.watches.remove(req.Path, req.Type) {
			return nil, zkproto.ErrOK
		}
		return nil, zkproto.ErrNoWatcher
	}
	kind := kindPersistent
	if zkproto.AddWatchMode(req.Type) == zkproto.AddWatchPersistentRecursive {
		kind = kindRecursive
	}
	g, err := c.watches.prepare(c.requestContext(), req.Path, kind, 0, true)
	if err != nil {
		return nil, errCode(err)
	}
	if g != nil {
		p.hold(g)
		c.watches.arm(g, g.e.at)
	}
	return &zkproto.ErrorResponse{Err: zkproto.ErrOK}, zkproto.ErrOK
}

// validWatchType reports whether t names a WatcherType (checkWatches,
// removeWatches) or an addWatch mode. ZooKeeper answers any other value
// with MarshallingError, its reply to a request it could not process.
func validWatchType(op zkproto.OpCode, t int32) bool {
	if op == zkproto.OpAddWatch {
		mode := zkproto.AddWatchMode(t)
		return mode == zkproto.AddWatchPersistent || mode == zkproto.AddWatchPersistentRecursive
	}
	return t >= watcherChildren && t <= watcherPersistentRecursive
}

// setWatches sets again, after a reconnect, the watches the client held,
// each reporting at once the latest change it missed after relativeZxid.
// The client holds those watches already, so their notifications do not
// wait for the reply: as in ZooKeeper, a missed change is notified before
// it, and the reply, whose zxid is past the change, never comes first
// (conn.zxidLocked). p is nil for the setWatches deferred to an addauth.
func (c *conn) setWatches(p *pending, req *zkproto.SetWatches) zkproto.ErrCode {
	if !c.isReady() {
		// An anonymous connection: set them once addauth attaches the
		// session (a client resends its credentials and its watches at
		// once after a reconnect, in either order).
		if len(c.deferredWatches) < maxDeferredSetWatches {
			c.deferredWatches = append(c.deferredWatches, req)
			return zkproto.ErrOK
		}
		return zkproto.ErrNoAuth
	}
	known := uint64(max(req.RelativeZxid, 1))
	lists := []struct {
		paths []string
		kind  watchKind
	}{
		{req.DataWatches, kindData}, {req.ExistWatches, kindExist}, {req.ChildWatches, kindChild},
		{req.PersistentWatches, kindPersistent}, {req.PersistentRecursiveWatches, kindRecursive},
	}
	for _, list := range lists {
		for _, path := range list.paths {
			if api.ValidatePath(path) != nil {
				continue // never a watch of a latch client
			}
			g, err := c.watches.prepare(c.requestContext(), path, list.kind, known, false)
			if err != nil {
				return errCode(err)
			}
			if g != nil {
				p.hold(g)
				c.watches.arm(g, g.e.at)
			}
		}
	}
	return zkproto.ErrOK
}

// maxDeferredSetWatches bounds the setWatches an anonymous connection may
// send before its addauth.
const maxDeferredSetWatches = 4

// getACL reports, as the node's ACL, one world:anyone entry with the
// permissions the connection's user has on it (ZooKeeper's bits: read;
// write, create and delete with write; admin with admin).
func (c *conn) getACL(p *pending, path string) (zkproto.Record, zkproto.ErrCode) {
	n, err := c.readNode(p, path, false)
	if err != nil {
		return nil, errCode(err)
	}
	access, err := c.l.srv.AccessOn(c.requestContext(), path)
	if err != nil {
		return nil, errCode(err)
	}
	var perms int32
	if access.Read {
		perms |= zkproto.PermRead
	}
	if access.Write {
		perms |= zkproto.PermWrite | zkproto.PermCreate | zkproto.PermDelete
	}
	if access.Admin {
		perms |= zkproto.PermAdmin
	}
	acl := []zkproto.ACL{{Perms: perms, ID: zkproto.ID{Scheme: "world", ID: "anyone"}}}
	return &zkproto.GetACLResponse{ACL: acl, Stat: c.statOf(n)}, zkproto.ErrOK
}

// clientInfo is one entry of whoAmI's reply.
type clientInfo struct{ scheme, user string }

// whoAmIResponse is the reply of whoAmI (107).
type whoAmIResponse struct{ infos []clientInfo }

// Encode implements zkproto.Record.
func (r *whoAmIResponse) Encode(w *zkproto.Writer) {
	w.VectorLen(len(r.infos), false)
	for _, i := range r.infos {
		w.String(i.scheme)
		w.String(i.user)
	}
}

// Decode implements zkproto.Record (replies are never decoded here).
func (r *whoAmIResponse) Decode(*zkproto.Reader) {}

// nonNil returns b, or an empty slice for nil.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
