package command

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// sampleAuth covers every auth change kind and every field.
var sampleAuth = []Command{
	{Op: OpAuth, Auth: AuthOp{Kind: AuthEnable}},
	{Op: OpAuth, ID: 7, Auth: AuthOp{Kind: AuthDisable}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserAdd, User: "alice", Secret: []byte("$2a$10$hash")}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserAdd, User: "cert-only"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserDelete, User: "alice"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserPasswd, User: "alice", Secret: []byte("h2")}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserGrant, User: "alice", Role: "ops"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthUserRevoke, User: "alice", Role: "ops"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthRoleAdd, Role: "ops"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthRoleDelete, Role: "ops"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthRoleGrant, Role: "ops", Perm: PermWrite, Prefix: "/locks"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthRoleRevoke, Role: "ops", Perm: PermAdmin, Prefix: "/"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthTokenIssue, User: "alice", Secret: bytes.Repeat([]byte{0xab}, 32), Expires: 1 << 41, Now: 1 << 40}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthTokenRevoke, Secret: bytes.Repeat([]byte{1}, 32)}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaSet, Prefix: "/q", MaxNodes: 10, MaxBytes: 1 << 20}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaClear, Prefix: "/q"}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaSync, Epoch: 42, Quotas: []QuotaDef{
		{Prefix: "/a", MaxNodes: 5, Epoch: 40}, {Prefix: "/b/c", MaxBytes: 300, Epoch: 42}, {Prefix: "/", Epoch: 1}}}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaGive, Prefix: "/a", Shard: 3, Epoch: 40, MaxNodes: 2}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaTake, Prefix: "/a", Seq: 9, Epoch: 40, MaxBytes: 7}},
	{Op: OpAuth, Auth: AuthOp{Kind: AuthQuotaSettle, Shard: 1023, Seq: 1 << 33}},
}

func TestAuthRoundTrip(t *testing.T) {
	for _, c := range sampleAuth {
		t.Run(c.Auth.Kind.String(), func(t *testing.T) {
			data := c.Marshal()
			if len(data) != c.Size() {
				t.Errorf("Marshal gave %d bytes, Size says %d", len(data), c.Size())
			}
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, c) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
			}
			if again := got.Marshal(); !bytes.Equal(again, data) {
				t.Errorf("re-encodes to %x, want %x", again, data)
			}
		})
	}
}

// TestAuthSectionOnlyOnAuth: the auth section exists only for OpAuth, so the
// encoding of every other op is what it was before auth.
func TestAuthSectionOnlyOnAuth(t *testing.T) {
	put := Command{Op: OpPut, Path: "/a", Value: []byte("v")}
	before := put.Marshal()
	put.Auth = AuthOp{Kind: AuthUserAdd, User: "x"}
	if after := put.Marshal(); !bytes.Equal(before, after) {
		t.Fatalf("a put with Auth encodes to %x, want %x", after, before)
	}
}

func TestAuthUnmarshalRejects(t *testing.T) {
	header := []byte{FormatVersion, byte(OpAuth), 0, 0, 0}
	cases := map[string][]byte{
		"no section":       header,
		"truncated header": append(append([]byte{}, header...), byte(AuthEnable)),
		"unknown kind":     append(append([]byte{}, header...), byte(authKindCount), 0, 0),
		"unknown perm":     append(append([]byte{}, header...), byte(AuthRoleGrant), byte(permCount), 0),
		"unknown bits":     append(append([]byte{}, header...), byte(AuthEnable), 0, 0x40),
		"empty user":       append(append([]byte{}, header...), byte(AuthUserAdd), 0, authHasUser, 0),
		"zero expiry":      append(append([]byte{}, header...), byte(AuthTokenIssue), 0, authHasExpires, 0),
		"trailing":         append(append([]byte{}, header...), byte(AuthEnable), 0, 0, 9),
		"zero quotas":      append(append([]byte{}, header...), byte(AuthQuotaSync), 0, 0x80, 0x10, 0),
		"quotas truncated": append(append([]byte{}, header...), byte(AuthQuotaSync), 0, 0x80, 0x10, 1, 2, '/'),
		"quota count huge": append(append([]byte{}, header...), byte(AuthQuotaSync), 0, 0x80, 0x10, 0xff, 0x7f, 2, '/', 'a', 1, 1, 1),
		"zero seq":         append(append([]byte{}, header...), byte(AuthQuotaSettle), 0, 0x80, 0x04, 0),
		"version 2":        {FormatV2, byte(OpAuth), 0, 0, 0, byte(AuthEnable), 0, 0},
		"version 1":        {FormatV1, byte(OpAuth), 0, 0, 0, byte(AuthEnable), 0, 0},
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Unmarshal(data); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmarshal(%x) = %v, want ErrMalformed", data, err)
			}
		})
	}
}

func TestParsePerm(t *testing.T) {
	for _, p := range []Perm{PermRead, PermWrite, PermAdmin} {
		if got, ok := ParsePerm(p.String()); !ok || got != p {
			t.Errorf("ParsePerm(%q) = %v, %v", p.String(), got, ok)
		}
	}
	for _, s := range []string{"", "none", "Read", "rw"} {
		if _, ok := ParsePerm(s); ok {
			t.Errorf("ParsePerm(%q) accepted", s)
		}
	}
}

func FuzzUnmarshalAuth(f *testing.F) {
	for _, c := range sampleAuth {
		f.Add(c.Marshal())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Unmarshal(data)
		if err != nil {
			return
		}
		if again := c.Marshal(); !bytes.Equal(again, data) {
			t.Fatalf("%x decodes but re-encodes to %x", data, again)
		}
	})
}
