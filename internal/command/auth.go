package command

import (
	"encoding/binary"
	"fmt"
)

// AuthKind is the kind of change an OpAuth command makes to the auth state.
type AuthKind uint8

// The auth changes. The numeric values are part of the encoding: new kinds
// are appended at the end.
const (
	// AuthEnable turns authentication on; the user "root" must exist.
	AuthEnable AuthKind = iota
	// AuthDisable turns authentication off (users and roles stay).
	AuthDisable
	// AuthUserAdd makes user User with password hash Secret (empty: a user
	// that cannot log in with a password, e.g. one known by certificate).
	AuthUserAdd
	// AuthUserDelete deletes user User and every token issued to it.
	AuthUserDelete
	// AuthUserPasswd replaces User's password hash with Secret and revokes
	// every token issued to it.
	AuthUserPasswd
	// AuthUserGrant gives user User the role Role.
	AuthUserGrant
	// AuthUserRevoke takes the role Role from user User.
	AuthUserRevoke
	// AuthRoleAdd makes the role Role, with no grant.
	AuthRoleAdd
	// AuthRoleDelete deletes the role Role and takes it from every user.
	AuthRoleDelete
	// AuthRoleGrant grants Perm on the path prefix Prefix to role Role.
	AuthRoleGrant
	// AuthRoleRevoke removes the grant of Perm on Prefix from role Role.
	AuthRoleRevoke
	// AuthTokenIssue records a token for user User: Secret is the SHA-256
	// of the token, Expires its expiry and Now the proposer's clock (both
	// Unix milliseconds); tokens expired at Now are forgotten.
	AuthTokenIssue
	// AuthTokenRevoke forgets the token whose SHA-256 is Secret.
	AuthTokenRevoke
	// AuthQuotaSet sets the quota on the path prefix Prefix: at most
	// MaxNodes nodes and MaxBytes bytes of values under it (0: no limit).
	AuthQuotaSet
	// AuthQuotaClear removes the quota on Prefix.
	AuthQuotaClear
	// The quota ledger of a sharded cluster (internal/fsm, quota.go): each
	// shard holds an allotment of every quota, and room moves between
	// shards by a give in the donor and a take in the recipient. Proposed
	// by the server only, never by a client.
	//
	// AuthQuotaSync, in a shard other than 0, replaces its quotas with
	// Quotas, shard 0's table as of shard 0's index Epoch (applied only if
	// Epoch is above the last one applied).
	AuthQuotaSync
	// AuthQuotaGive, in the donor shard: give MaxNodes nodes and MaxBytes
	// bytes of the allotment of the quota on Prefix (of epoch Epoch) to
	// shard Shard, if that much is free; recorded as outgoing with the
	// next sequence number to Shard.
	AuthQuotaGive
	// AuthQuotaTake, in the recipient shard: add the room of transfer Seq
	// from shard Shard (Prefix, Epoch, MaxNodes, MaxBytes as given), if
	// Seq is the next from Shard; an earlier Seq is a duplicate, ignored.
	AuthQuotaTake
	// AuthQuotaSettle, in the donor shard: drop the outgoing transfers to
	// shard Shard up to Seq, which Shard has taken.
	AuthQuotaSettle
	authKindCount
)

var authKindNames = [...]string{"enable", "disable", "user_add", "user_delete", "user_passwd", "user_grant",
	"user_revoke", "role_add", "role_delete", "role_grant", "role_revoke", "token_issue", "token_revoke",
	"quota_set", "quota_clear", "quota_sync", "quota_give", "quota_take", "quota_settle"}

func (k AuthKind) String() string {
	if k < authKindCount {
		return authKindNames[k]
	}
	return fmt.Sprintf("auth_kind(%d)", uint8(k))
}

// Perm is a permission level. Each level includes the ones below it: write
// includes read, admin includes write.
type Perm uint8

// The permission levels. The numeric values are part of the encoding.
const (
	PermNone Perm = iota
	PermRead
	PermWrite
	PermAdmin
	permCount
)

var permNames = [...]string{"none", "read", "write", "admin"}

func (p Perm) String() string {
	if p < permCount {
		return permNames[p]
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

// ParsePerm returns the level named s ("read", "write" or "admin").
func ParsePerm(s string) (Perm, bool) {
	for p := PermRead; p < permCount; p++ {
		if permNames[p] == s {
			return p, true
		}
	}
	return PermNone, false
}

// AuthOp is the change of an OpAuth command. Which fields matter depends on
// Kind; the others are zero.
type AuthOp struct {
	Kind    AuthKind
	Perm    Perm
	User    string
	Role    string
	Prefix  string
	Secret  []byte
	Expires uint64
	Now     uint64
	// MaxNodes and MaxBytes are an AuthQuotaSet's limits, or the room a
	// give or take moves.
	MaxNodes uint64
	MaxBytes uint64
	// Shard is the other shard of a give, take or settle (0 is shard 0);
	// Seq a transfer's sequence number; Epoch a quota's epoch (give, take)
	// or the quota table's (sync); Quotas the table a sync carries.
	Shard  uint64
	Seq    uint64
	Epoch  uint64
	Quotas []QuotaDef
}

// QuotaDef is one quota of an AuthQuotaSync: its limits and its epoch,
// the index of shard 0's log that set it.
type QuotaDef struct {
	Prefix             string
	MaxNodes, MaxBytes uint64
	Epoch              uint64
}

// Bits of an auth change's presence mask.
const (
	authHasUser = 1 << iota
	authHasRole
	authHasPrefix
	authHasSecret
	authHasExpires
	authHasNow
	authHasMaxNodes // since quotas; absent from every older command
	authHasMaxBytes
	authHasShard // since sharded quotas, likewise
	authHasSeq
	authHasEpoch
	authHasQuotas
	authPresenceMask = 1<<iota - 1
)

// authHeaderLen is the kind and permission bytes.
const authHeaderLen = 2

// The auth section follows every other field of an OpAuth command, and only
// of an OpAuth command: kind, permission, presence mask, then the present
// fields in the order user, role, prefix, secret, expires, now, max nodes,
// max bytes (the last two since quotas: older commands never set their
// presence bits, so they decode as before), then shard, seq, epoch and the
// quota table (count, then each quota's prefix, max nodes, max bytes and
// epoch; since sharded quotas, likewise). Commands of
// other ops carry no section, so their encoding is unchanged.

func (c *Command) authSectionLen() int {
	if c.Op != OpAuth {
		return 0
	}
	a := &c.Auth
	n := authHeaderLen + uvarintLen(a.presence())
	n += optionalBytesLen(len(a.User)) + optionalBytesLen(len(a.Role)) + optionalBytesLen(len(a.Prefix))
	n += optionalBytesLen(len(a.Secret)) + optionalUvarintLen(a.Expires) + optionalUvarintLen(a.Now)
	n += optionalUvarintLen(a.MaxNodes) + optionalUvarintLen(a.MaxBytes)
	n += optionalUvarintLen(a.Shard) + optionalUvarintLen(a.Seq) + optionalUvarintLen(a.Epoch)
	if len(a.Quotas) > 0 {
		n += uvarintLen(uint64(len(a.Quotas)))
		for _, q := range a.Quotas {
			n += uvarintLen(uint64(len(q.Prefix))) + len(q.Prefix)
			n += uvarintLen(q.MaxNodes) + uvarintLen(q.MaxBytes) + uvarintLen(q.Epoch)
		}
	}
	return n
}

func (c *Command) appendAuthSection(dst []byte) []byte {
	if c.Op != OpAuth {
		return dst
	}
	a := &c.Auth
	dst = append(dst, byte(a.Kind), byte(a.Perm))
	dst = binary.AppendUvarint(dst, a.presence())
	dst = appendOptionalString(dst, a.User)
	dst = appendOptionalString(dst, a.Role)
	dst = appendOptionalString(dst, a.Prefix)
	if len(a.Secret) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(a.Secret)))
		dst = append(dst, a.Secret...)
	}
	dst = appendOptionalUvarint(dst, a.Expires)
	dst = appendOptionalUvarint(dst, a.Now)
	dst = appendOptionalUvarint(dst, a.MaxNodes)
	dst = appendOptionalUvarint(dst, a.MaxBytes)
	dst = appendOptionalUvarint(dst, a.Shard)
	dst = appendOptionalUvarint(dst, a.Seq)
	dst = appendOptionalUvarint(dst, a.Epoch)
	if len(a.Quotas) == 0 {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(a.Quotas)))
	for _, q := range a.Quotas {
		dst = binary.AppendUvarint(dst, uint64(len(q.Prefix)))
		dst = append(dst, q.Prefix...)
		dst = binary.AppendUvarint(dst, q.MaxNodes)
		dst = binary.AppendUvarint(dst, q.MaxBytes)
		dst = binary.AppendUvarint(dst, q.Epoch)
	}
	return dst
}

func (a *AuthOp) presence() uint64 {
	var m uint64
	set := func(bit uint64, present bool) {
		if present {
			m |= bit
		}
	}
	set(authHasUser, a.User != "")
	set(authHasRole, a.Role != "")
	set(authHasPrefix, a.Prefix != "")
	set(authHasSecret, len(a.Secret) > 0)
	set(authHasExpires, a.Expires != 0)
	set(authHasNow, a.Now != 0)
	set(authHasMaxNodes, a.MaxNodes != 0)
	set(authHasMaxBytes, a.MaxBytes != 0)
	set(authHasShard, a.Shard != 0)
	set(authHasSeq, a.Seq != 0)
	set(authHasEpoch, a.Epoch != 0)
	set(authHasQuotas, len(a.Quotas) > 0)
	return m
}

// authOp decodes the auth section of an OpAuth command. Secret aliases data.
func (d *decoder) authOp() AuthOp {
	var a AuthOp
	if d.err != nil {
		return a
	}
	if len(d.data)-d.offset < authHeaderLen {
		d.fail("auth change header truncated")
		return a
	}
	kind, perm := d.data[d.offset], d.data[d.offset+1]
	switch {
	case AuthKind(kind) >= authKindCount:
		d.fail("unknown auth change kind %d", kind)
	case Perm(perm) >= permCount:
		d.fail("unknown permission %d", perm)
	}
	if d.err != nil {
		return a
	}
	d.offset += authHeaderLen
	a.Kind, a.Perm = AuthKind(kind), Perm(perm)
	mask := d.uvarint("auth presence mask")
	if d.err == nil && mask&^authPresenceMask != 0 {
		d.fail("unknown auth presence bits %#x", mask&^authPresenceMask)
	}
	a.User = d.optionalString(mask, authHasUser, "auth user")
	a.Role = d.optionalString(mask, authHasRole, "auth role")
	a.Prefix = d.optionalString(mask, authHasPrefix, "auth prefix")
	a.Secret = d.optionalBytes(mask, authHasSecret, "auth secret")
	a.Expires = d.optionalUvarint(mask, authHasExpires, "auth expiry")
	a.Now = d.optionalUvarint(mask, authHasNow, "auth clock")
	a.MaxNodes = d.optionalUvarint(mask, authHasMaxNodes, "quota nodes")
	a.MaxBytes = d.optionalUvarint(mask, authHasMaxBytes, "quota bytes")
	a.Shard = d.optionalUvarint(mask, authHasShard, "quota shard")
	a.Seq = d.optionalUvarint(mask, authHasSeq, "quota transfer seq")
	a.Epoch = d.optionalUvarint(mask, authHasEpoch, "quota epoch")
	if mask&authHasQuotas != 0 {
		a.Quotas = d.quotaDefs()
	}
	return a
}

// quotaDefs decodes the quota table of an AuthQuotaSync: a count of at
// least 1, then each quota. Prefix strings are copies.
func (d *decoder) quotaDefs() []QuotaDef {
	n := d.uvarint("quota count")
	if d.err != nil {
		return nil
	}
	// Every quota takes at least four bytes.
	if n == 0 || n > uint64(len(d.data)-d.offset)/4 {
		d.fail("quota count %d: want 1 to what the %d remaining bytes hold", n, len(d.data)-d.offset)
		return nil
	}
	defs := make([]QuotaDef, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		size := d.uvarint("quota prefix")
		if d.err == nil && size > uint64(len(d.data)-d.offset) {
			d.fail("quota prefix length %d exceeds the %d remaining bytes", size, len(d.data)-d.offset)
		}
		if d.err != nil {
			return nil
		}
		q := QuotaDef{Prefix: string(d.data[d.offset : d.offset+int(size)])}
		d.offset += int(size)
		q.MaxNodes, q.MaxBytes, q.Epoch = d.uvarint("quota nodes"), d.uvarint("quota bytes"), d.uvarint("quota epoch")
		defs = append(defs, q)
	}
	return defs
}
