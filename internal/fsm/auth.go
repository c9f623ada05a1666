package fsm

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// RootUser is the user that may do everything once auth is enabled,
// whatever its roles. Auth cannot be enabled without it, and it cannot be
// deleted while auth is enabled.
const RootUser = "root"

// Bounds of the auth state, so that one snapshot frame and one apply stay
// small whatever is proposed. A change over a bound is refused (too_large).
const (
	MaxAuthNameLen  = 128  // bytes of a user or role name
	MaxPrefixLen    = 1024 // bytes of a granted path prefix
	MaxSecretLen    = 256  // bytes of a password hash or token digest
	MaxUsers        = 10000
	MaxRoles        = 10000
	MaxUserRoles    = 64  // roles of one user
	MaxRoleGrants   = 256 // grants of one role
	MaxUserTokens   = 16  // live tokens of one user: the oldest goes first
	tokenDigestSize = 32  // SHA-256
)

// Grant is one permission of a role: Perm on the path Prefix and below.
type Grant struct {
	Perm   command.Perm
	Prefix string
}

// UserInfo is a user as listed: never its password hash.
type UserInfo struct {
	Name        string
	Roles       []string
	HasPassword bool
}

// RoleInfo is a role as listed.
type RoleInfo struct {
	Name   string
	Grants []Grant
}

type authUser struct {
	name  string
	hash  []byte   // the password hash; nil: no password login
	roles []string // sorted; replaced on change, never modified in place
}

type authRole struct {
	name   string
	grants []Grant // sorted by prefix then perm; replaced on change
}

type authToken struct {
	digest  string // SHA-256 of the token
	user    string
	expires uint64 // Unix milliseconds
}

// authState is the replicated auth state. Its trees are copied on write by
// Clone, like the node tree.
type authState struct {
	enabled bool
	users   *btree.BTreeG[authUser]
	roles   *btree.BTreeG[authRole]
	tokens  *btree.BTreeG[authToken]
	// quotas is sorted by prefix (quota.go); replaced on change, never
	// modified in place, so clones may share it.
	quotas []Quota
}

func newAuthState() authState {
	return authState{
		users:  btree.NewBTreeGOptions(func(a, b authUser) bool { return a.name < b.name }, treeOptions),
		roles:  btree.NewBTreeGOptions(func(a, b authRole) bool { return a.name < b.name }, treeOptions),
		tokens: btree.NewBTreeGOptions(func(a, b authToken) bool { return a.digest < b.digest }, treeOptions),
	}
}

func (a *authState) clone() authState {
	return authState{enabled: a.enabled, users: a.users.Copy(), roles: a.roles.Copy(), tokens: a.tokens.Copy(), quotas: a.quotas}
}

// empty reports whether a holds nothing: such a state is not written in
// snapshots, so a cluster that never used auth writes what it wrote before.
func (a *authState) empty() bool {
	return !a.enabled && a.users.Len() == 0 && a.roles.Len() == 0 && a.tokens.Len() == 0 && len(a.quotas) == 0
}

// applyAuth applies an OpAuth command at index.
func (f *FSM) applyAuth(index uint64, cmd *command.Command) (Result, []Event) {
	op := &cmd.Auth
	if err := checkAuthOp(op); err != nil {
		return refuse(err)
	}
	a := &f.auth
	var err *api.Error
	switch op.Kind {
	case command.AuthEnable:
		err = a.enable()
	case command.AuthDisable:
		a.enabled = false
	case command.AuthUserAdd:
		err = a.addUser(op.User, op.Secret)
	case command.AuthUserDelete:
		err = a.deleteUser(op.User)
	case command.AuthUserPasswd:
		err = a.setPassword(op.User, op.Secret)
	case command.AuthUserGrant, command.AuthUserRevoke:
		err = a.changeUserRole(op.User, op.Role, op.Kind == command.AuthUserGrant)
	case command.AuthRoleAdd:
		err = a.addRole(op.Role)
	case command.AuthRoleDelete:
		err = a.deleteRole(op.Role)
	case command.AuthRoleGrant, command.AuthRoleRevoke:
		err = a.changeGrant(op.Role, Grant{Perm: op.Perm, Prefix: op.Prefix}, op.Kind == command.AuthRoleGrant)
	case command.AuthTokenIssue:
		err = a.issueToken(op)
	case command.AuthTokenRevoke:
		if _, ok := a.tokens.Delete(authToken{digest: string(op.Secret)}); !ok {
			err = api.Errorf(api.CodeNotFound, "no such token")
		}
	case command.AuthQuotaSet:
		err = f.setQuota(index, Quota{Prefix: op.Prefix, MaxNodes: op.MaxNodes, MaxBytes: op.MaxBytes})
	case command.AuthQuotaClear:
		err = f.clearQuota(index, op.Prefix)
	case command.AuthQuotaSync, command.AuthQuotaGive, command.AuthQuotaTake, command.AuthQuotaSettle:
		err = f.applyLedger(op)
	}
	if err != nil {
		return refuse(err)
	}
	return Result{}, nil
}

// checkAuthOp checks the fields of op that its kind uses.
func checkAuthOp(op *command.AuthOp) *api.Error {
	if err := checkAuthName("user", op.User); err != nil && usesUser(op.Kind) {
		return err
	}
	if err := checkAuthName("role", op.Role); err != nil && usesRole(op.Kind) {
		return err
	}
	if len(op.Secret) > MaxSecretLen {
		return api.Errorf(api.CodeTooLarge, "secret of %d bytes over the limit of %d", len(op.Secret), MaxSecretLen)
	}
	switch op.Kind {
	case command.AuthRoleGrant, command.AuthRoleRevoke:
		if op.Perm == command.PermNone {
			return api.Errorf(api.CodeInvalidArgument, "a grant needs a permission: read, write or admin")
		}
		return CheckPrefix(op.Prefix)
	case command.AuthQuotaSet:
		if op.MaxNodes == 0 && op.MaxBytes == 0 {
			return api.Errorf(api.CodeInvalidArgument, "a quota needs a limit: max_nodes or max_bytes")
		}
		return CheckPrefix(op.Prefix)
	case command.AuthQuotaClear, command.AuthQuotaGive, command.AuthQuotaTake:
		return CheckPrefix(op.Prefix)
	case command.AuthTokenIssue, command.AuthTokenRevoke:
		if len(op.Secret) != tokenDigestSize {
			return api.Errorf(api.CodeInvalidArgument, "a token digest has %d bytes, not %d", tokenDigestSize, len(op.Secret))
		}
	}
	return nil
}

func usesUser(k command.AuthKind) bool {
	switch k {
	case command.AuthUserAdd, command.AuthUserDelete, command.AuthUserPasswd, command.AuthUserGrant,
		command.AuthUserRevoke, command.AuthTokenIssue:
		return true
	}
	return false
}

func usesRole(k command.AuthKind) bool {
	switch k {
	case command.AuthUserGrant, command.AuthUserRevoke, command.AuthRoleAdd, command.AuthRoleDelete,
		command.AuthRoleGrant, command.AuthRoleRevoke:
		return true
	}
	return false
}

// CheckAuthName checks a user or role name: 1 to MaxAuthNameLen bytes of
// UTF-8 without control characters, ':' (the separator of ZooKeeper digest
// credentials) or surrounding spaces.
func checkAuthName(what, name string) *api.Error {
	switch {
	case name == "":
		return api.Errorf(api.CodeInvalidArgument, "a %s name is required", what)
	case len(name) > MaxAuthNameLen:
		return api.Errorf(api.CodeInvalidArgument, "%s name of %d bytes over the limit of %d", what, len(name), MaxAuthNameLen)
	case !utf8.ValidString(name) || strings.ContainsAny(name, ":") || strings.TrimSpace(name) != name:
		return api.Errorf(api.CodeInvalidArgument, "%s name %q: UTF-8 without ':' or surrounding spaces", what, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return api.Errorf(api.CodeInvalidArgument, "%s name %q holds a control character", what, name)
		}
	}
	return nil
}

// CheckAuthName is checkAuthName for the server, which checks a request
// before it proposes it.
func CheckAuthName(what, name string) error {
	if err := checkAuthName(what, name); err != nil {
		return err
	}
	return nil
}

// CheckPrefix checks a granted path prefix: "/" or an absolute path without
// a trailing slash, empty or dot components.
func CheckPrefix(prefix string) *api.Error {
	if len(prefix) > MaxPrefixLen {
		return api.Errorf(api.CodeInvalidArgument, "prefix of %d bytes over the limit of %d", len(prefix), MaxPrefixLen)
	}
	if prefix == "/" {
		return nil
	}
	if !strings.HasPrefix(prefix, "/") || !utf8.ValidString(prefix) {
		return api.Errorf(api.CodeInvalidArgument, "prefix %q is not an absolute path", prefix)
	}
	for _, part := range strings.Split(prefix[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return api.Errorf(api.CodeInvalidArgument, "prefix %q has an empty, '.' or '..' component", prefix)
		}
	}
	return nil
}

func (a *authState) enable() *api.Error {
	if _, ok := a.users.Get(authUser{name: RootUser}); !ok {
		return api.Errorf(api.CodePreconditionFailed, "auth needs the user %q first", RootUser)
	}
	a.enabled = true
	return nil
}

func (a *authState) addUser(name string, hash []byte) *api.Error {
	if _, ok := a.users.Get(authUser{name: name}); ok {
		return api.Errorf(api.CodePreconditionFailed, "user %q exists", name)
	}
	if a.users.Len() >= MaxUsers {
		return api.Errorf(api.CodeTooLarge, "the limit of %d users is reached", MaxUsers)
	}
	a.users.Set(authUser{name: name, hash: bytes.Clone(hash)})
	return nil
}

func (a *authState) user(name string) (authUser, *api.Error) {
	u, ok := a.users.Get(authUser{name: name})
	if !ok {
		return u, api.Errorf(api.CodeNotFound, "no user %q", name)
	}
	return u, nil
}

func (a *authState) deleteUser(name string) *api.Error {
	if _, err := a.user(name); err != nil {
		return err
	}
	if name == RootUser && a.enabled {
		return api.Errorf(api.CodePreconditionFailed, "user %q cannot be deleted while auth is enabled", RootUser)
	}
	a.users.Delete(authUser{name: name})
	a.dropTokens(func(t authToken) bool { return t.user == name })
	return nil
}

func (a *authState) setPassword(name string, hash []byte) *api.Error {
	u, err := a.user(name)
	if err != nil {
		return err
	}
	u.hash = bytes.Clone(hash)
	a.users.Set(u)
	a.dropTokens(func(t authToken) bool { return t.user == name })
	return nil
}

func (a *authState) changeUserRole(name, role string, grant bool) *api.Error {
	u, err := a.user(name)
	if err != nil {
		return err
	}
	i, has := slices.BinarySearch(u.roles, role)
	switch {
	case grant && has:
		return api.Errorf(api.CodePreconditionFailed, "user %q has role %q", name, role)
	case !grant && !has:
		return api.Errorf(api.CodeNotFound, "user %q has no role %q", name, role)
	case grant && len(u.roles) >= MaxUserRoles:
		return api.Errorf(api.CodeTooLarge, "user %q has the limit of %d roles", name, MaxUserRoles)
	}
	if grant {
		if _, ok := a.roles.Get(authRole{name: role}); !ok {
			return api.Errorf(api.CodeNotFound, "no role %q", role)
		}
		u.roles = slices.Insert(slices.Clone(u.roles), i, role)
	} else {
		u.roles = slices.Delete(slices.Clone(u.roles), i, i+1)
	}
	a.users.Set(u)
	return nil
}

func (a *authState) addRole(name string) *api.Error {
	if _, ok := a.roles.Get(authRole{name: name}); ok {
		return api.Errorf(api.CodePreconditionFailed, "role %q exists", name)
	}
	if a.roles.Len() >= MaxRoles {
		return api.Errorf(api.CodeTooLarge, "the limit of %d roles is reached", MaxRoles)
	}
	a.roles.Set(authRole{name: name})
	return nil
}

func (a *authState) deleteRole(name string) *api.Error {
	if _, ok := a.roles.Delete(authRole{name: name}); !ok {
		return api.Errorf(api.CodeNotFound, "no role %q", name)
	}
	var holders []authUser
	a.users.Scan(func(u authUser) bool {
		if _, has := slices.BinarySearch(u.roles, name); has {
			holders = append(holders, u)
		}
		return true
	})
	for _, u := range holders {
		i, _ := slices.BinarySearch(u.roles, name)
		u.roles = slices.Delete(slices.Clone(u.roles), i, i+1)
		a.users.Set(u)
	}
	return nil
}

func grantCompare(x, y Grant) int {
	if c := strings.Compare(x.Prefix, y.Prefix); c != 0 {
		return c
	}
	return int(x.Perm) - int(y.Perm)
}

func (a *authState) changeGrant(name string, g Grant, grant bool) *api.Error {
	r, ok := a.roles.Get(authRole{name: name})
	if !ok {
		return api.Errorf(api.CodeNotFound, "no role %q", name)
	}
	i, has := slices.BinarySearchFunc(r.grants, g, grantCompare)
	switch {
	case grant && has:
		return api.Errorf(api.CodePreconditionFailed, "role %q already grants %v on %q", name, g.Perm, g.Prefix)
	case !grant && !has:
		return api.Errorf(api.CodeNotFound, "role %q grants no %v on %q", name, g.Perm, g.Prefix)
	case grant && len(r.grants) >= MaxRoleGrants:
		return api.Errorf(api.CodeTooLarge, "role %q has the limit of %d grants", name, MaxRoleGrants)
	}
	if grant {
		r.grants = slices.Insert(slices.Clone(r.grants), i, g)
	} else {
		r.grants = slices.Delete(slices.Clone(r.grants), i, i+1)
	}
	a.roles.Set(r)
	return nil
}

// issueToken records a token, first forgetting every token expired at the
// proposer's clock op.Now and, if the user holds MaxUserTokens, its token
// that expires first.
func (a *authState) issueToken(op *command.AuthOp) *api.Error {
	if _, err := a.user(op.User); err != nil {
		return err
	}
	if op.Expires <= op.Now {
		return api.Errorf(api.CodeInvalidArgument, "a token must expire after it is issued")
	}
	if _, ok := a.tokens.Get(authToken{digest: string(op.Secret)}); ok {
		return api.Errorf(api.CodePreconditionFailed, "token exists")
	}
	a.dropTokens(func(t authToken) bool { return t.expires <= op.Now })
	var held []authToken
	a.tokens.Scan(func(t authToken) bool {
		if t.user == op.User {
			held = append(held, t)
		}
		return true
	})
	if len(held) >= MaxUserTokens {
		first := slices.MinFunc(held, func(x, y authToken) int {
			if c := cmp.Compare(x.expires, y.expires); c != 0 {
				return c
			}
			return strings.Compare(x.digest, y.digest)
		})
		a.tokens.Delete(first)
	}
	a.tokens.Set(authToken{digest: string(op.Secret), user: op.User, expires: op.Expires})
	return nil
}

func (a *authState) dropTokens(drop func(authToken) bool) {
	var doomed []authToken
	a.tokens.Scan(func(t authToken) bool {
		if drop(t) {
			doomed = append(doomed, t)
		}
		return true
	})
	for _, t := range doomed {
		a.tokens.Delete(t)
	}
}

// AuthEnabled reports whether authentication is enabled.
func (f *FSM) AuthEnabled() bool { return f.auth.enabled }

// Permitted reports whether user may act with perm on path: the user is
// RootUser, or one of its roles grants perm or more on path or an
// ancestor of it. An unknown user is permitted nothing.
func (f *FSM) Permitted(user string, perm command.Perm, path string) bool {
	return f.auth.permitted(user, perm, path)
}

func (a *authState) permitted(user string, perm command.Perm, path string) bool {
	u, ok := a.users.Get(authUser{name: user})
	if !ok {
		return false
	}
	if user == RootUser {
		return true
	}
	for _, name := range u.roles {
		r, _ := a.roles.Get(authRole{name: name})
		for _, g := range r.grants {
			if g.Perm >= perm && PrefixCovers(g.Prefix, path) {
				return true
			}
		}
	}
	return false
}

// PrefixCovers reports whether the granted prefix covers path: "/" covers
// every path; "/a" covers "/a" and "/a/..." but not "/ab".
func PrefixCovers(prefix, path string) bool {
	if prefix == "/" || path == prefix {
		return true
	}
	return strings.HasPrefix(path, prefix) && len(path) > len(prefix) && path[len(prefix)] == '/'
}

// UserExists reports whether user exists.
func (f *FSM) UserExists(user string) bool {
	_, ok := f.auth.users.Get(authUser{name: user})
	return ok
}

// PasswordHash returns user's password hash, for the server's login check
// only (it must never leave the server), and whether the user has one.
func (f *FSM) PasswordHash(user string) ([]byte, bool) {
	u, ok := f.auth.users.Get(authUser{name: user})
	if !ok || len(u.hash) == 0 {
		return nil, false
	}
	return u.hash, true
}

// TokenUser returns the user of the token whose SHA-256 is digest, if the
// token is recorded, unexpired at nowMs and its user exists.
func (f *FSM) TokenUser(digest []byte, nowMs uint64) (string, bool) {
	t, ok := f.auth.tokens.Get(authToken{digest: string(digest)})
	if !ok || t.expires <= nowMs || !f.UserExists(t.user) {
		return "", false
	}
	return t.user, true
}

// TokenExpires returns the expiry, in Unix milliseconds of the issuing
// member's clock, of the token whose SHA-256 is digest, if it is recorded.
func (f *FSM) TokenExpires(digest []byte) (uint64, bool) {
	t, ok := f.auth.tokens.Get(authToken{digest: string(digest)})
	return t.expires, ok
}

// Users lists the users by name, without their password hashes.
func (f *FSM) Users() []UserInfo {
	var list []UserInfo
	f.auth.users.Scan(func(u authUser) bool {
		list = append(list, UserInfo{Name: u.name, Roles: slices.Clone(u.roles), HasPassword: len(u.hash) > 0})
		return true
	})
	return list
}

// Roles lists the roles by name.
func (f *FSM) Roles() []RoleInfo {
	var list []RoleInfo
	f.auth.roles.Scan(func(r authRole) bool {
		list = append(list, RoleInfo{Name: r.name, Grants: slices.Clone(r.grants)})
		return true
	})
	return list
}

// SessionsOwnedBy counts the live sessions user created. It costs a scan of
// the sessions.
func (f *FSM) SessionsOwnedBy(user string) int {
	n := 0
	f.sessions.Scan(func(s session) bool {
		if s.owner == user {
			n++
		}
		return true
	})
	return n
}
