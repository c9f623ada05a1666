package api

// LoginRequest is the body of POST /v1/auth/login.
type LoginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// LoginResponse carries a token to send as "Authorization: Bearer <token>".
type LoginResponse struct {
	Token       string `json:"token"`
	User        string `json:"user"`
	ExpiresAtMs uint64 `json:"expires_at_ms"`
	Index       uint64 `json:"index"`
}

// AuthChange is the body of POST /v1/auth: one change of the auth state.
// Action is one of enable, disable, user_add, user_delete, user_passwd,
// user_grant, user_revoke, role_add, role_delete, role_grant, role_revoke,
// quota_set, quota_clear.
type AuthChange struct {
	Action   string `json:"action"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Role     string `json:"role,omitempty"`
	Perm     string `json:"perm,omitempty"` // read, write or admin
	Prefix   string `json:"prefix,omitempty"`
	// MaxNodes and MaxBytes are a quota_set's limits on Prefix (0: none).
	MaxNodes uint64 `json:"max_nodes,omitempty"`
	MaxBytes uint64 `json:"max_bytes,omitempty"`
}

// AuthQuota is a quota on the nodes under a prefix (the prefix's node
// included) and their values' bytes, with what they use now (summed over
// the shards).
type AuthQuota struct {
	Prefix   string `json:"prefix"`
	MaxNodes uint64 `json:"max_nodes"` // 0: no limit
	MaxBytes uint64 `json:"max_bytes"` // 0: no limit
	Nodes    uint64 `json:"nodes"`
	Bytes    uint64 `json:"bytes"`
	// Shards, with more than one shard, holds each shard's part: what it
	// uses and the room it holds of the quota (its allotment).
	Shards []AuthQuotaShard `json:"shards,omitempty"`
}

// AuthQuotaShard is one shard's part of a quota: its usage and allotment.
type AuthQuotaShard struct {
	Shard      int    `json:"shard"`
	Nodes      uint64 `json:"nodes"`
	Bytes      uint64 `json:"bytes"`
	AllotNodes uint64 `json:"allot_nodes"`
	AllotBytes uint64 `json:"allot_bytes"`
}

// AuthChanged answers an AuthChange or a logout: the index it applied at.
type AuthChanged struct {
	Index uint64 `json:"index"`
}

// AuthUser is a user as GET /v1/auth lists it: never a password hash.
type AuthUser struct {
	Name        string   `json:"name"`
	Roles       []string `json:"roles"`
	HasPassword bool     `json:"has_password"`
}

// AuthGrant is a role's permission on a path prefix and below.
type AuthGrant struct {
	Perm   string `json:"perm"`
	Prefix string `json:"prefix"`
}

// AuthRole is a role as GET /v1/auth lists it.
type AuthRole struct {
	Name   string      `json:"name"`
	Grants []AuthGrant `json:"grants"`
}

// AuthStatus is GET /v1/auth's answer.
type AuthStatus struct {
	Enabled bool        `json:"enabled"`
	Users   []AuthUser  `json:"users"`
	Roles   []AuthRole  `json:"roles"`
	Quotas  []AuthQuota `json:"quotas"`
	Index   uint64      `json:"index"`
}
