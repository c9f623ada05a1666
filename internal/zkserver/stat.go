package zkserver

import (
	"context"
	"errors"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// worldAnyone is the one ACL latch reports until it has auth.
var worldAnyone = []zkproto.ACL{{Perms: zkproto.PermAll, ID: zkproto.ID{Scheme: "world", ID: "anyone"}}}

// zkVersion is a latch version (1 on create) as ZooKeeper counts (0 on
// create).
func zkVersion(v uint64) int32 {
	if v == 0 {
		return 0
	}
	return int32(v - 1)
}

// latchVersion is the latch version a ZooKeeper version names.
func latchVersion(v int32) uint64 { return uint64(v) + 1 }

// statOf maps a node onto ZooKeeper's Stat: ctime and mtime are the times
// the log recorded for the node's create and latest write, cversion counts
// its children's creates and deletes and pzxid is the index of the latest
// (the node's mzxid for a node of a binary that kept none); latch keeps no
// ACL version (aversion 0). The owner of an ephemeral node is shown as the
// session id to that session only; to others as its handle (an id is a
// bearer secret), which is never 0 and never the reader's own id.
func (c *conn) statOf(n server.NodeView) zkproto.Stat {
	pzxid := n.ChildrenModifiedIndex
	if pzxid == 0 {
		pzxid = n.ModifiedIndex
	}
	return zkproto.Stat{
		Czxid: int64(n.CreatedIndex), Mzxid: int64(n.ModifiedIndex), Pzxid: int64(pzxid),
		Ctime: int64(n.CreatedAtMs), Mtime: int64(n.ModifiedAtMs),
		Version: zkVersion(n.Version), Cversion: int32(n.ChildrenVersion), EphemeralOwner: c.ownerOf(n.Owner),
		DataLength: int32(len(n.Value)), NumChildren: int32(n.ChildrenCount),
	}
}

// ownerOf is the ephemeralOwner this connection's session sees for owner.
func (c *conn) ownerOf(owner uint64) int64 {
	switch owner {
	case 0:
		return 0
	case c.session:
		return int64(owner)
	}
	return int64(api.SessionHandle(owner))
}

// errCode maps an error of the server API onto ZooKeeper's codes, for the
// cases that do not depend on the operation (precondition_failed does: the
// operations classify it themselves).
func errCode(err error) zkproto.ErrCode {
	if err == nil {
		return zkproto.ErrOK
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return zkproto.ErrOperationTimeout
	}
	switch api.CodeOf(err) {
	case api.CodeNotFound:
		return zkproto.ErrNoNode
	case api.CodeSessionExpired:
		return zkproto.ErrSessionExpired
	case api.CodeInvalidArgument, api.CodeTooLarge:
		return zkproto.ErrBadArguments
	case api.CodePreconditionFailed:
		return zkproto.ErrBadVersion
	case api.CodeOverloaded:
		return zkproto.ErrThrottledOp
	case api.CodeUnavailable:
		return zkproto.ErrOperationTimeout
	case api.CodeUnauthenticated, api.CodePermissionDenied:
		return zkproto.ErrNoAuth
	case api.CodeQuotaExceeded:
		return zkproto.ErrQuotaExceeded
	}
	return zkproto.ErrSystemError
}

// isCode reports whether err is the server API error code.
func isCode(err error, code api.Code) bool { return err != nil && api.CodeOf(err) == code }
