package zkserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// handshake answers the connect request in body: a new session (id 0), or
// the resumption of a live one whose password matches. It answers in the
// form asked (with the trailing readOnly byte only if the request had it).
// It returns false when the connection must end: a malformed request, a
// lastZxidSeen this member has not applied (refused without a reply, as
// ZooKeeper does, so the client tries another server), a session that is
// unknown, expired or presented with a wrong password (answered with a
// zero timeout, which clients report as session expiry), or a member that
// cannot create or check a session now (no reply: the client retries; a
// live session must never be reported expired for want of a quorum). A
// resumed session of another user is reported expired too. With auth
// enabled, a connection that proves no user is answered with a session
// that becomes usable at its addauth (auth.go).
func (c *conn) handshake(body []byte) bool {
	var req zkproto.ConnectRequest
	if err := zkproto.Decode(body, &req, "ConnectRequest"); err != nil {
		c.l.log.Debug("zk: bad connect request", "remote", c.nc.RemoteAddr().String(), "err", err)
		return false
	}
	if !c.caughtUp(req.LastZxidSeen) {
		c.l.log.Info("zk: refusing a client that has seen a newer zxid than this member applied",
			"remote", c.nc.RemoteAddr().String(), "client_zxid", req.LastZxidSeen, "applied", c.l.srv.AppliedIndex())
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.l.cfg.HandshakeTimeout)
	defer cancel()
	resp := zkproto.ConnectResponse{HasReadOnly: req.HasReadOnly, Passwd: make([]byte, passwordLen)}
	c.creds = server.Credentials{CertName: certificateName(c.nc), Source: sourceHost(c.nc.RemoteAddr())}
	c.credsCtx = nil // before any request: requestContext makes it from these
	id, timeoutMs, anonymous, err := c.open(ctx, req)
	switch {
	case errors.Is(err, errSessionGone) || isCode(err, api.CodeSessionExpired) || isCode(err, api.CodeNotFound) ||
		isCode(err, api.CodePermissionDenied):
		// (Permission denied: a resumed session of another user.)
		// Timeout 0 and session 0: the client reports its session expired.
		_ = c.writeConnectResponse(&resp)
		return false
	case err != nil:
		// The member cannot tell now (no leader, no quorum): no answer, so
		// the client tries again, here or elsewhere, with its session.
		c.l.log.Info("zk: cannot open or check a session now; closing the connection", "remote", c.nc.RemoteAddr().String(), "err", err)
		return false
	}
	c.session, c.timeout = id, time.Duration(timeoutMs)*time.Millisecond
	c.watches = newWatchTable(c)
	if !c.l.sharded {
		// Read after open's linearizable barrier (a resumed session's check)
		// or its create: a later connection of the session reads a higher
		// floor, and its stream supersedes this one's (internal/fsm,
		// stream.go).
		if c.writes, err = server.NewWriteStream(id, c.l.srv.AppliedIndex()); err != nil {
			c.l.log.Info("zk: cannot open the connection's write stream; closing the connection", "remote", c.nc.RemoteAddr().String(), "err", err)
			if c.stream != nil {
				c.stream.Close()
			}
			return false
		}
	}
	c.saw(uint64(max(req.LastZxidSeen, 0)))
	resp.TimeOut, resp.SessionID, resp.Passwd = int32(timeoutMs), int64(id), sessionPassword(id)
	if err := c.writeConnectResponse(&resp); err != nil {
		if c.stream != nil {
			c.stream.Close()
		}
		return false
	}
	if !anonymous {
		close(c.ready)
		c.heartbeat()
	}
	return true
}

// open opens the session the connect request asks for: with its event
// stream attached, unless the connection is anonymous (auth enabled and
// no user proved: auth.go), whose session waits for its addauth.
func (c *conn) open(ctx context.Context, req zkproto.ConnectRequest) (id uint64, timeoutMs int64, anonymous bool, err error) {
	if anonymous, err = c.mustAuthenticate(); err != nil {
		return 0, 0, false, err
	}
	if anonymous {
		id, timeoutMs, err = c.openAnonymous(ctx, req)
		return id, timeoutMs, true, err
	}
	if id, timeoutMs, err = c.openSession(ctx, req); err == nil {
		c.stream, _, err = c.l.srv.Events(server.WithCredentials(ctx, c.creds), id)
	}
	return id, timeoutMs, false, err
}

// caughtUp reports whether this member has applied zxid, waiting up to
// ConnectCatchUp for it to do so.
func (c *conn) caughtUp(zxid int64) bool {
	if zxid <= 0 || uint64(zxid) <= c.l.srv.AppliedIndex() {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.l.cfg.ConnectCatchUp)
	defer cancel()
	// It waits for the index to be applied here (asking the leader only
	// whether it exists at all).
	return c.l.srv.WaitApplied(ctx, uint64(zxid)) == nil
}

// errSessionGone is a resumed session that does not exist for the client:
// unknown, ended, or presented with a wrong password.
var errSessionGone = errors.New("zkserver: no such session")

// openSession creates a session or checks the one the client resumes, and
// returns its id and timeout in milliseconds. A session that is not alive
// is errSessionGone or the server's not_found or session_expired; any other
// error means the member cannot tell now.
func (c *conn) openSession(ctx context.Context, req zkproto.ConnectRequest) (uint64, int64, error) {
	ctx = server.WithCredentials(ctx, c.creds)
	if req.SessionID == 0 {
		sess, err := c.l.srv.CreateSession(ctx, uint64(max(req.TimeOut, 0)))
		if err != nil {
			return 0, 0, fmt.Errorf("create a session: %w", err)
		}
		id, err := api.ParseID(sess.SessionID)
		if err != nil {
			return 0, 0, fmt.Errorf("create a session: %w", err)
		}
		return id, int64(sess.TimeoutMs), nil
	}
	id := uint64(req.SessionID)
	if !passwordMatches(id, req.Passwd) {
		c.l.log.Info("zk: wrong session password", "remote", c.nc.RemoteAddr().String())
		return 0, 0, errSessionGone
	}
	timeoutMs, err := c.l.srv.LiveSessionTimeout(ctx, id)
	if err != nil {
		return 0, 0, fmt.Errorf("check session: %w", err)
	}
	return id, int64(timeoutMs), nil
}

// writeConnectResponse sends the handshake's answer.
func (c *conn) writeConnectResponse(resp *zkproto.ConnectResponse) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeFrame(zkproto.Encode(resp))
}
