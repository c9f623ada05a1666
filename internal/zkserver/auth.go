package zkserver

import (
	"context"
	"crypto/tls"
	"net"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/tlsconfig"
	"github.com/latch-io/latch/internal/zkproto"
)

// Authentication on the ZooKeeper port (docs/zookeeper.md, "Auth").
//
// A connection's user is the common name of its verified client
// certificate (with --client-cert-auth) if such a user exists, else the
// user of its digest addauth ("user:password", checked against the same
// bcrypt hash as a login). Every request passes the server's one choke
// point with that user, and a refusal is NoAuth. With auth enabled, a
// connection that proves no user at its handshake is anonymous: it is told
// a session id, but the session has no event stream here (and a new one is
// not even created) until an addauth succeeds; meanwhile every operation
// but ping, whoAmI and close is refused with NoAuth. So an anonymous client
// holds nothing in the replicated state.

// requestContext is the connection's context carrying its credentials,
// for the server calls of one request.
func (c *conn) requestContext() context.Context {
	c.credsMu.Lock()
	defer c.credsMu.Unlock()
	if c.credsCtx == nil {
		c.credsCtx = server.WithCredentials(c.ctx, c.creds)
	}
	return c.credsCtx
}

// digestUser is the user of the connection's digest auth ("" if none).
func (c *conn) digestUser() string {
	c.credsMu.Lock()
	defer c.credsMu.Unlock()
	return c.creds.User
}

func (c *conn) setDigestUser(user string) {
	c.credsMu.Lock()
	defer c.credsMu.Unlock()
	c.creds.User = user
	c.credsCtx = nil // the next request carries the new user
}

// certificateName is the common name of the connection's verified client
// certificate, or "". The TLS handshake is complete: the connect request
// was read through it.
func certificateName(nc net.Conn) string {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return ""
	}
	state := tc.ConnectionState()
	name, _ := tlsconfig.Identity(&state)
	return name
}

// sourceHost is the host of a remote address.
func sourceHost(addr net.Addr) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// isReady reports whether the session is usable: its stream attached.
func (c *conn) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// mustAuthenticate reports whether the handshake leaves the connection
// anonymous: auth is enabled and the connection proves no user. An error
// other than unauthenticated (the member cannot tell now, the user's rate)
// is returned.
func (c *conn) mustAuthenticate() (bool, error) {
	err := c.l.srv.Authenticate(c.requestContext())
	if isCode(err, api.CodeUnauthenticated) {
		return true, nil
	}
	return false, err
}

// openAnonymous answers the connect request of a connection that must
// authenticate first: a new session gets an id drawn now and is created at
// the first addauth; a resumed one is checked alive (its id and password
// are the proof) and attached at the addauth, which also checks its owner.
func (c *conn) openAnonymous(ctx context.Context, req zkproto.ConnectRequest) (uint64, int64, error) {
	if req.SessionID == 0 {
		id, err := server.NewSessionID()
		if err != nil {
			return 0, 0, err
		}
		c.unborn = true
		return id, int64(c.l.srv.ClampSessionTimeout(uint64(max(req.TimeOut, 0)))), nil
	}
	id := uint64(req.SessionID)
	if !passwordMatches(id, req.Passwd) {
		c.l.log.Info("zk: wrong session password", "remote", c.nc.RemoteAddr().String())
		return 0, 0, errSessionGone
	}
	timeoutMs, err := c.l.srv.ResumableSession(ctx, id)
	return id, int64(timeoutMs), err
}

// auth serves addauth. Only the digest scheme is known; any other fails,
// and ZooKeeper then ends the connection. With auth disabled the digest is
// accepted and not checked (and a connection left anonymous by auth
// enabled at its handshake gets its session). With auth enabled, "user:password" must be a
// latch user's, a connection has one user (a second addauth naming another
// fails), and an anonymous connection's session is then created or
// attached, owned by that user: a resumed session of another user fails.
// A failure answers AuthFailed and ends the connection.
func (c *conn) auth(p *zkproto.AuthPacket) (zkproto.Record, zkproto.ErrCode, bool) {
	if p.Scheme != "digest" {
		return nil, zkproto.ErrAuthFailed, true
	}
	if !c.l.srv.AuthEnabled() {
		code := c.attachWithoutAuth()
		return nil, code, code != zkproto.ErrOK
	}
	user, password, ok := strings.Cut(string(p.Auth), ":")
	if !ok || (c.digestUser() != "" && c.digestUser() != user) {
		return nil, zkproto.ErrAuthFailed, true
	}
	ctx, cancel := context.WithTimeout(c.requestContext(), c.l.cfg.HandshakeTimeout)
	defer cancel()
	if err := c.l.srv.CheckPassword(ctx, user, password); err != nil {
		c.l.log.Info("zk: addauth refused", "remote", c.nc.RemoteAddr().String(), "user", user, "err", err)
		return nil, authFailure(err), true
	}
	c.setDigestUser(user)
	if c.isReady() {
		return nil, zkproto.ErrOK, false
	}
	if err := c.attach(ctx); err != nil {
		c.l.log.Info("zk: cannot attach the session after addauth", "session", c.session, "user", user, "err", err)
		return nil, authFailure(err), true
	}
	return nil, zkproto.ErrOK, false
}

// attachWithoutAuth attaches the session of a connection left anonymous
// by a handshake made while auth was enabled, now that it is disabled.
func (c *conn) attachWithoutAuth() zkproto.ErrCode {
	if c.isReady() {
		return zkproto.ErrOK
	}
	ctx, cancel := context.WithTimeout(c.requestContext(), c.l.cfg.HandshakeTimeout)
	defer cancel()
	if err := c.attach(ctx); err != nil {
		return authFailure(err)
	}
	return zkproto.ErrOK
}

// authFailure is the code of a failed addauth: AuthFailed for a refusal,
// OperationTimeout (the connection ends unanswered) when the member cannot
// tell now.
func authFailure(err error) zkproto.ErrCode {
	switch api.CodeOf(err) {
	case api.CodeUnauthenticated, api.CodePermissionDenied, api.CodeOverloaded, api.CodePreconditionFailed:
		return zkproto.ErrAuthFailed
	case api.CodeSessionExpired, api.CodeNotFound:
		return zkproto.ErrSessionExpired
	}
	return errCode(err)
}

// attach makes an anonymous connection's session usable once it has a
// user: creates it if new, checks its owner if resumed, attaches its event
// stream, replays the setWatches that came before, and starts its
// heartbeats.
func (c *conn) attach(ctx context.Context) error {
	rctx := server.WithCredentials(ctx, server.CredentialsFrom(c.requestContext()))
	if c.unborn {
		if _, err := c.l.srv.CreateSessionWithID(rctx, c.session, uint64(c.timeout.Milliseconds())); err != nil {
			return err
		}
		c.unborn = false
	} else if _, err := c.l.srv.LiveSessionTimeout(rctx, c.session); err != nil {
		return err
	}
	stream, _, err := c.l.srv.Events(rctx, c.session)
	if err != nil {
		return err
	}
	c.stream = stream
	close(c.ready)
	c.heartbeat()
	deferred := c.deferredWatches
	c.deferredWatches = nil
	for _, req := range deferred {
		if code := c.setWatches(nil, req); code != zkproto.ErrOK {
			c.l.log.Info("zk: setWatches after addauth refused", "session", c.session, "code", code)
		}
	}
	return nil
}

// whoAmI reports the connection's identities as ZooKeeper does: its
// address, and the certificate's and the digest's users.
func (c *conn) whoAmI() zkproto.Record {
	infos := []clientInfo{{"ip", sourceHost(c.nc.RemoteAddr())}}
	creds := server.CredentialsFrom(c.requestContext())
	if creds.CertName != "" {
		infos = append(infos, clientInfo{"x509", creds.CertName})
	}
	if creds.User != "" {
		infos = append(infos, clientInfo{"digest", creds.User})
	}
	return &whoAmIResponse{infos: infos}
}
