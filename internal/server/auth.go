package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// The auth state (users, roles, grants, the enabled flag, issued tokens) is
// replicated through the meta group's log (command.OpAuth), so a change
// takes effect on every member at the same index. Every client operation of
// every listener passes one check, authorize, before it reads or proposes.

// AuthConfig tunes authentication. Zero fields take the defaults.
type AuthConfig struct {
	// TokenTTL is how long a login token is valid (default 1h).
	TokenTTL time.Duration
	// PasswordCost is the bcrypt cost of password hashes (default
	// bcrypt.DefaultCost; tests lower it to bcrypt.MinCost).
	PasswordCost int
	// UserRate is the requests per second each user may make on each member
	// once auth is enabled (0: no limit), with bursts of UserBurst (default
	// UserRate). Over it: 429 overloaded with Retry-After.
	UserRate  float64
	UserBurst int
	// MaxUserSessions caps the live sessions one user holds (0: no cap).
	MaxUserSessions int
	// MaxUserWatches caps the watches one user holds on each member, over
	// all its sessions (0: no cap). Over it: 429 overloaded.
	MaxUserWatches int
	// LoginRate is the password checks (logins, ZooKeeper digest addauth)
	// per second each member allows per user name and per source address
	// (default 5; negative: no limit), with bursts of LoginBurst (default
	// 20). Over it: 429 overloaded with Retry-After, before any bcrypt work.
	LoginRate  float64
	LoginBurst int
}

const (
	defaultTokenTTL   = time.Hour
	defaultLoginRate  = 5
	defaultLoginBurst = 20
	// tokenPrefix marks latch tokens, so a token found in a log is
	// recognisable; the rest is 32 random bytes, base64url.
	tokenPrefix = "latch_"
	// maxPasswordLen is bcrypt's limit: longer passwords are refused rather
	// than silently truncated.
	maxPasswordLen = 72
)

func (c AuthConfig) tokenTTL() time.Duration {
	if c.TokenTTL <= 0 {
		return defaultTokenTTL
	}
	return c.TokenTTL
}

func (c AuthConfig) passwordCost() int {
	if c.PasswordCost == 0 {
		return bcrypt.DefaultCost
	}
	return c.PasswordCost
}

// Credentials are what a request presents: the verified client
// certificate's common name and a bearer token, each "" if absent. The
// listeners put them in the request's context (WithCredentials).
type Credentials struct {
	CertName string
	Token    string
	// Source is the client's address (IP, no port), for the login rate
	// limit per source; "" counts against no source.
	Source string
	// User is a user already authenticated by the listener (ZooKeeper
	// digest auth checks the password through Login's check, CheckPassword).
	User string
}

type credentialsKey struct{}

// WithCredentials returns ctx carrying creds for authorize.
func WithCredentials(ctx context.Context, creds Credentials) context.Context {
	return context.WithValue(ctx, credentialsKey{}, creds)
}

// CredentialsFrom returns the credentials ctx carries.
func CredentialsFrom(ctx context.Context) Credentials {
	creds, _ := ctx.Value(credentialsKey{}).(Credentials)
	return creds
}

// ErrUnauthenticated and permission errors are *api.Error values.
func unauthenticated(format string, args ...any) *api.Error {
	return api.Errorf(api.CodeUnauthenticated, format, args...)
}

// AuthEnabled reports whether this member applied the enabling of auth.
func (s *Server) AuthEnabled() bool {
	var enabled bool
	s.metaGroup().View(func(f *fsm.FSM) { enabled = f.AuthEnabled() })
	return enabled
}

// authorize is the one choke point: every client operation of every
// listener calls it with the permission it needs on the path it touches
// ("/" for cluster-wide operations, which need admin) before it reads or
// proposes; command.PermNone asks only that the request prove a user. With auth disabled it allows everything and returns "". Else it
// returns the authenticated user, or unauthenticated (401) if the request
// proves no user, or permission_denied (403) if the user's roles do not
// grant perm on path.
func (s *Server) authorize(ctx context.Context, perm command.Perm, path string) (string, error) {
	creds := CredentialsFrom(ctx)
	now := uint64(s.cfg.Clock.Now().UnixMilli())
	var user string
	var err error
	s.metaGroup().View(func(f *fsm.FSM) {
		if !f.AuthEnabled() {
			return
		}
		if user, err = identify(f, creds, now); err != nil {
			return
		}
		if perm != command.PermNone && !f.Permitted(user, perm, path) {
			err = api.Errorf(api.CodePermissionDenied, "user %q has no %v permission on %q", user, perm, path)
		}
	})
	if err == nil {
		err = s.limitUser(user)
	}
	return user, err
}

// Authenticate is authorize asking only for an authenticated user, for the
// endpoints that have no server method of their own (the dashboard,
// /metrics, status).
func (s *Server) Authenticate(ctx context.Context) error {
	_, err := s.authorize(ctx, permNone, "/")
	return err
}

// identify returns the user creds prove: a valid token's user, else a
// listener-authenticated user, else the certificate's common name if such a
// user exists.
func identify(f *fsm.FSM, creds Credentials, nowMs uint64) (string, error) {
	switch {
	case creds.Token != "":
		user, ok := f.TokenUser(tokenDigest(creds.Token), nowMs)
		if !ok {
			return "", unauthenticated("the token is unknown, expired or revoked: log in again")
		}
		return user, nil
	case creds.User != "":
		if !f.UserExists(creds.User) {
			return "", unauthenticated("no user %q", creds.User)
		}
		return creds.User, nil
	case creds.CertName != "":
		if !f.UserExists(creds.CertName) {
			return "", unauthenticated("the client certificate's name %q is no user", creds.CertName)
		}
		return creds.CertName, nil
	}
	return "", unauthenticated("authentication required: log in (POST /v1/auth/login) and send Authorization: Bearer, or present a client certificate")
}

func tokenDigest(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Login checks user's password and records a new token through the log.
// A token is 32 random bytes; the log and snapshots hold only its SHA-256,
// so neither a backup nor a follower's disk yields a usable token.
func (s *Server) Login(ctx context.Context, user, password string) (api.LoginResponse, error) {
	if err := s.CheckPassword(ctx, user, password); err != nil {
		return api.LoginResponse{}, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return api.LoginResponse{}, fmt.Errorf("server: draw a token: %w", err)
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.cfg.Clock.Now()
	expires := now.Add(s.cfg.Auth.tokenTTL())
	index, err := s.proposeAuth(ctx, command.AuthOp{Kind: command.AuthTokenIssue, User: user,
		Secret: tokenDigest(token), Expires: uint64(expires.UnixMilli()), Now: uint64(now.UnixMilli())})
	if err != nil {
		return api.LoginResponse{}, err
	}
	return api.LoginResponse{Token: token, User: user, ExpiresAtMs: uint64(expires.UnixMilli()), Index: index}, nil
}

// CheckPassword returns nil if password is user's, else unauthenticated
// (the same answer for an unknown user and a wrong password). It reads
// through a barrier, so a password change acknowledged anywhere applies.
func (s *Server) CheckPassword(ctx context.Context, user, password string) error {
	if err := s.limitLogin(user, CredentialsFrom(ctx).Source); err != nil {
		return err
	}
	g := s.metaGroup()
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return err
	}
	var hash []byte
	var ok bool
	g.View(func(f *fsm.FSM) { hash, ok = f.PasswordHash(user) })
	if !ok {
		// Spend the same time as a real check, so timing tells nothing.
		_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return unauthenticated("wrong user or password")
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return unauthenticated("wrong user or password")
	}
	return nil
}

// dummyHash is compared when the user is unknown; made on first use, so
// that starting a server costs no bcrypt hash.
var dummyHash = sync.OnceValue(func() []byte {
	hash, _ := bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.DefaultCost)
	return hash
})

// Logout revokes the token the request carries.
func (s *Server) Logout(ctx context.Context) (uint64, error) {
	token := CredentialsFrom(ctx).Token
	if token == "" {
		return 0, unauthenticated("no bearer token to revoke")
	}
	return s.proposeAuth(ctx, command.AuthOp{Kind: command.AuthTokenRevoke, Secret: tokenDigest(token)})
}

var authActions = map[string]command.AuthKind{
	"enable": command.AuthEnable, "disable": command.AuthDisable,
	"user_add": command.AuthUserAdd, "user_delete": command.AuthUserDelete, "user_passwd": command.AuthUserPasswd,
	"user_grant": command.AuthUserGrant, "user_revoke": command.AuthUserRevoke,
	"role_add": command.AuthRoleAdd, "role_delete": command.AuthRoleDelete,
	"role_grant": command.AuthRoleGrant, "role_revoke": command.AuthRoleRevoke,
	"quota_set": command.AuthQuotaSet, "quota_clear": command.AuthQuotaClear,
}

// ChangeAuth applies an admin's change of the auth state. It needs admin on
// "/" once auth is enabled. Passwords are hashed here, with a fresh salt;
// only the hash enters the log.
func (s *Server) ChangeAuth(ctx context.Context, r api.AuthChange) (uint64, error) {
	if _, err := s.authorize(ctx, command.PermAdmin, "/"); err != nil {
		return 0, err
	}
	kind, ok := authActions[r.Action]
	if !ok {
		return 0, api.Errorf(api.CodeInvalidArgument, "unknown auth action %q", r.Action)
	}
	op := command.AuthOp{Kind: kind, User: r.User, Role: r.Role, Prefix: r.Prefix}
	if kind == command.AuthQuotaSet {
		op.MaxNodes, op.MaxBytes = r.MaxNodes, r.MaxBytes
	}
	if kind == command.AuthRoleGrant || kind == command.AuthRoleRevoke {
		perm, ok := command.ParsePerm(r.Perm)
		if !ok {
			return 0, api.Errorf(api.CodeInvalidArgument, "perm %q: want read, write or admin", r.Perm)
		}
		op.Perm = perm
	}
	if r.Password != "" || kind == command.AuthUserPasswd {
		hash, err := s.hashPassword(r.Password)
		if err != nil {
			return 0, err
		}
		op.Secret = hash
	}
	if kind == command.AuthQuotaSet && s.cfg.Shards > 1 {
		nodes, bytes, err := s.othersUsage(ctx, r.Prefix)
		if err != nil {
			return 0, err
		}
		op.UsedNodes, op.UsedBytes = nodes, bytes
	}
	index, err := s.proposeAuth(ctx, op)
	if err != nil || (kind != command.AuthQuotaSet && kind != command.AuthQuotaClear) || s.cfg.Shards == 1 {
		return index, err
	}
	// Every shard enforces the quota: the change is answered once each has
	// shard 0's table (runQuotaLedger finishes it otherwise).
	if err := s.syncQuotaTables(ctx); err != nil {
		return 0, s.metaGroup().Unavailable("the quota change applied in shard 0 at index %d, but not yet in every shard (it completes on its own): %v", index, err)
	}
	return index, nil
}

func (s *Server) hashPassword(password string) ([]byte, error) {
	switch {
	case password == "":
		return nil, api.Errorf(api.CodeInvalidArgument, "a password is required")
	case len(password) > maxPasswordLen:
		return nil, api.Errorf(api.CodeInvalidArgument, "a password has at most %d bytes", maxPasswordLen)
	case strings.ContainsRune(password, 0):
		return nil, api.Errorf(api.CodeInvalidArgument, "a password holds no NUL byte")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.cfg.Auth.passwordCost())
	if err != nil {
		return nil, fmt.Errorf("server: hash a password: %w", err)
	}
	return hash, nil
}

// proposeAuth proposes an auth change in the meta group, which holds the
// auth state; its refusal is an error.
func (s *Server) proposeAuth(ctx context.Context, op command.AuthOp) (uint64, error) {
	return s.proposeLedger(ctx, s.metaGroup(), op)
}

// AuthState lists the auth state, for an admin once auth is enabled.
func (s *Server) AuthState(ctx context.Context) (api.AuthStatus, error) {
	if _, err := s.authorize(ctx, command.PermAdmin, "/"); err != nil {
		return api.AuthStatus{}, err
	}
	var users []fsm.UserInfo
	var roles []fsm.RoleInfo
	var quotas []fsm.QuotaUsage
	st := api.AuthStatus{Users: []api.AuthUser{}, Roles: []api.AuthRole{}, Quotas: []api.AuthQuota{}}
	st.Index = s.metaGroup().View(func(f *fsm.FSM) {
		st.Enabled, users, roles, quotas = f.AuthEnabled(), f.Users(), f.Roles(), f.Quotas()
	})
	st.Quotas = s.quotaStatus(quotas)
	for _, u := range users {
		st.Users = append(st.Users, api.AuthUser{Name: u.Name, Roles: append([]string{}, u.Roles...), HasPassword: u.HasPassword})
	}
	for _, r := range roles {
		role := api.AuthRole{Name: r.Name, Grants: []api.AuthGrant{}}
		for _, g := range r.Grants {
			role.Grants = append(role.Grants, api.AuthGrant{Perm: g.Perm.String(), Prefix: g.Prefix})
		}
		st.Roles = append(st.Roles, role)
	}
	return st, nil
}

// authorizeAs is authorize for an operation made on behalf of session (0:
// none): the session must also belong to the authenticated user, so a
// leaked session id is useless to another user (403).
func (s *Server) authorizeAs(ctx context.Context, perm command.Perm, path string, session uint64) error {
	user, err := s.authorize(ctx, perm, path)
	if err != nil || user == "" || session == 0 {
		return err
	}
	return s.checkOwner(user, session)
}

// authorizeSessions checks that the request proves a user who owns every
// session in ids (auth disabled: nothing to check).
func (s *Server) authorizeSessions(ctx context.Context, ids ...uint64) error {
	user, err := s.authorize(ctx, command.PermNone, "/")
	if err != nil || user == "" {
		return err
	}
	for _, id := range ids {
		if err := s.checkOwner(user, id); err != nil {
			return err
		}
	}
	return nil
}

// AuthorizeSession is authorizeSessions for the listeners' calls that take
// no context of their own (cancelling a watch).
func (s *Server) AuthorizeSession(ctx context.Context, session uint64) error {
	return s.authorizeSessions(ctx, session)
}

// checkOwner refuses a session created by another user. A session unknown
// here passes: the operation itself then answers session_expired. A session
// made while auth was disabled has no owner, and only root may use it.
func (s *Server) checkOwner(user string, session uint64) error {
	var owner string
	var known bool
	s.metaGroup().View(func(f *fsm.FSM) {
		if sess, err := f.Session(session); err == nil {
			owner, known = sess.Owner, true
		}
	})
	if !known || owner == user || (owner == "" && user == fsm.RootUser) {
		return nil
	}
	return api.Errorf(api.CodePermissionDenied, "session %s belongs to another user", api.FormatID(session))
}

// authorizeTxn authorizes every operation of a transaction: write on the
// paths it creates, sets or deletes, read on the paths it checks. The
// first operation refused for want of a permission is named by an
// *api.TxnOpError, as a refusal of the state machine names its operation
// (ZooKeeper's multi reports NoAuth at that operation).
func (s *Server) authorizeTxn(ctx context.Context, r TxnRequest) error {
	for i, op := range r.Ops {
		perm := command.PermWrite
		if op.Kind == TxnCheck {
			perm = command.PermRead
		}
		if err := s.authorizeAs(ctx, perm, op.Path, r.SessionID); err != nil {
			return opRefusal(i, err)
		}
	}
	return s.authorizeAs(ctx, command.PermNone, "/", r.SessionID)
}

// authorizeReads authorizes read on every path of a batch of reads. A read
// refused for want of the permission fails on its own (denied[i], as a
// missing node's read does); any other refusal (no credentials) is the
// whole batch's error.
func (s *Server) authorizeReads(ctx context.Context, reads []ReadOp) ([]*api.Error, error) {
	var denied []*api.Error
	for i, r := range reads {
		refusal := s.authorizeAs(ctx, command.PermRead, r.Path, 0)
		if refusal == nil {
			continue
		}
		deniedErr := permissionDenied(refusal)
		if deniedErr == nil {
			return nil, refusal
		}
		if denied == nil {
			denied = make([]*api.Error, len(reads))
		}
		denied[i] = deniedErr
	}
	return denied, nil
}

// opRefusal names operation i as the one refused when err is a refusal of
// its path's permission; any other error is returned as it is.
func opRefusal(i int, err error) error {
	if denied := permissionDenied(err); denied != nil {
		return &api.TxnOpError{Op: i, Err: denied}
	}
	return err
}

// permissionDenied is err's *api.Error if err refuses a path's permission,
// else nil.
func permissionDenied(err error) *api.Error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodePermissionDenied {
		return apiErr
	}
	return nil
}

// The permissions the hooks in the request paths ask for.
const (
	permNone  = command.PermNone // any authenticated user
	permRead  = command.PermRead
	permWrite = command.PermWrite
	permAdmin = command.PermAdmin
)
