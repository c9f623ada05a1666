package fsm

import (
	"bytes"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

func authCmd(op command.AuthOp) command.Command { return command.Command{Op: command.OpAuth, Auth: op} }

func digest(b byte) []byte { return bytes.Repeat([]byte{b}, tokenDigestSize) }

// authSetup makes root, a reader of /app and a writer of /app/jobs, and
// enables auth.
var authSetup = []command.Command{
	authCmd(command.AuthOp{Kind: command.AuthUserAdd, User: RootUser, Secret: []byte("root-hash")}),
	authCmd(command.AuthOp{Kind: command.AuthRoleAdd, Role: "app-read"}),
	authCmd(command.AuthOp{Kind: command.AuthRoleGrant, Role: "app-read", Perm: command.PermRead, Prefix: "/app"}),
	authCmd(command.AuthOp{Kind: command.AuthRoleAdd, Role: "jobs"}),
	authCmd(command.AuthOp{Kind: command.AuthRoleGrant, Role: "jobs", Perm: command.PermWrite, Prefix: "/app/jobs"}),
	authCmd(command.AuthOp{Kind: command.AuthUserAdd, User: "alice", Secret: []byte("alice-hash")}),
	authCmd(command.AuthOp{Kind: command.AuthUserGrant, User: "alice", Role: "app-read"}),
	authCmd(command.AuthOp{Kind: command.AuthUserGrant, User: "alice", Role: "jobs"}),
	authCmd(command.AuthOp{Kind: command.AuthUserAdd, User: "cert-client"}),
	authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "alice", Secret: digest(1), Expires: 2000, Now: 1000}),
	authCmd(command.AuthOp{Kind: command.AuthEnable}),
}

func TestAuthPermissions(t *testing.T) {
	h := buildState(t, authSetup)
	f := h.f
	if !f.AuthEnabled() {
		t.Fatal("auth not enabled")
	}
	cases := []struct {
		user string
		perm command.Perm
		path string
		want bool
	}{
		{"alice", command.PermRead, "/app", true},
		{"alice", command.PermRead, "/app/x/y", true},
		{"alice", command.PermRead, "/apple", false}, // a prefix covers whole components
		{"alice", command.PermRead, "/", false},
		{"alice", command.PermWrite, "/app/x", false},
		{"alice", command.PermWrite, "/app/jobs", true},
		{"alice", command.PermWrite, "/app/jobs/1", true},
		{"alice", command.PermRead, "/app/jobs/1", true},
		{"alice", command.PermAdmin, "/app/jobs", false},
		{"cert-client", command.PermRead, "/app", false},
		{"nobody", command.PermRead, "/app", false},
		{RootUser, command.PermAdmin, "/", true},
		{RootUser, command.PermWrite, "/anything/at/all", true},
	}
	for _, c := range cases {
		if got := f.Permitted(c.user, c.perm, c.path); got != c.want {
			t.Errorf("Permitted(%q, %v, %q) = %v, want %v", c.user, c.perm, c.path, got, c.want)
		}
	}
}

func TestAuthRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup []command.Command
		cmd   command.Command
		want  api.Code
	}{
		{"enable without root", nil, authCmd(command.AuthOp{Kind: command.AuthEnable}), api.CodePreconditionFailed},
		{"delete root while enabled", authSetup, authCmd(command.AuthOp{Kind: command.AuthUserDelete, User: RootUser}), api.CodePreconditionFailed},
		{"user exists", authSetup, authCmd(command.AuthOp{Kind: command.AuthUserAdd, User: "alice"}), api.CodePreconditionFailed},
		{"grant unknown role", authSetup, authCmd(command.AuthOp{Kind: command.AuthUserGrant, User: "alice", Role: "nope"}), api.CodeNotFound},
		{"grant twice", authSetup, authCmd(command.AuthOp{Kind: command.AuthUserGrant, User: "alice", Role: "jobs"}), api.CodePreconditionFailed},
		{"revoke absent grant", authSetup, authCmd(command.AuthOp{Kind: command.AuthRoleRevoke, Role: "jobs", Perm: command.PermRead, Prefix: "/app/jobs"}), api.CodeNotFound},
		{"bad prefix", authSetup, authCmd(command.AuthOp{Kind: command.AuthRoleGrant, Role: "jobs", Perm: command.PermRead, Prefix: "/a/"}), api.CodeInvalidArgument},
		{"no perm", authSetup, authCmd(command.AuthOp{Kind: command.AuthRoleGrant, Role: "jobs", Prefix: "/a"}), api.CodeInvalidArgument},
		{"name with colon", nil, authCmd(command.AuthOp{Kind: command.AuthUserAdd, User: "a:b"}), api.CodeInvalidArgument},
		{"control character", nil, authCmd(command.AuthOp{Kind: command.AuthRoleAdd, Role: "a\nb"}), api.CodeInvalidArgument},
		{"long name", nil, authCmd(command.AuthOp{Kind: command.AuthRoleAdd, Role: string(bytes.Repeat([]byte("r"), MaxAuthNameLen+1))}), api.CodeInvalidArgument},
		{"short digest", authSetup, authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "alice", Secret: []byte("x"), Expires: 5, Now: 1}), api.CodeInvalidArgument},
		{"token already expired", authSetup, authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "alice", Secret: digest(9), Expires: 5, Now: 5}), api.CodeInvalidArgument},
		{"token of unknown user", authSetup, authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "zed", Secret: digest(9), Expires: 5, Now: 1}), api.CodeNotFound},
		{"revoke unknown token", authSetup, authCmd(command.AuthOp{Kind: command.AuthTokenRevoke, Secret: digest(9)}), api.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := buildState(t, c.setup)
			before := h.f.Hash()
			r, _ := h.apply(c.cmd)
			if codeOf(r.Err) != c.want {
				t.Fatalf("apply: %v, want code %s", r.Err, c.want)
			}
			after := h.f.Clone()
			after.applied = h.index - 1
			if after.Hash() != before {
				t.Error("a refused auth change changed the state")
			}
		})
	}
}

func TestAuthTokens(t *testing.T) {
	h := buildState(t, authSetup)
	if user, ok := h.f.TokenUser(digest(1), 1500); !ok || user != "alice" {
		t.Fatalf("TokenUser = %q, %v; want alice", user, ok)
	}
	if _, ok := h.f.TokenUser(digest(1), 2000); ok {
		t.Error("a token is valid at its expiry")
	}
	if _, ok := h.f.TokenUser(digest(2), 1500); ok {
		t.Error("an unknown token is valid")
	}
	// A password change revokes the user's tokens.
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthUserPasswd, User: "alice", Secret: []byte("new")}))
	if _, ok := h.f.TokenUser(digest(1), 1500); ok {
		t.Error("a token survived its user's password change")
	}
	if hash, ok := h.f.PasswordHash("alice"); !ok || string(hash) != "new" {
		t.Errorf("PasswordHash = %q, %v", hash, ok)
	}
	// Explicit revocation.
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "alice", Secret: digest(3), Expires: 9000, Now: 1000}))
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthTokenRevoke, Secret: digest(3)}))
	if _, ok := h.f.TokenUser(digest(3), 1500); ok {
		t.Error("a revoked token is valid")
	}
	// The cap: the token that expires first goes.
	for i := 0; i < MaxUserTokens+1; i++ {
		h.mustApply(authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: "alice", Secret: digest(byte(10 + i)), Expires: uint64(5000 + i), Now: 1000}))
	}
	if _, ok := h.f.TokenUser(digest(10), 1500); ok {
		t.Error("the token over the cap that expires first is still valid")
	}
	if _, ok := h.f.TokenUser(digest(byte(10+MaxUserTokens)), 1500); !ok {
		t.Error("the newest token is not valid")
	}
	// Issuing forgets the expired ones; deleting a user forgets its tokens.
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthTokenIssue, User: RootUser, Secret: digest(200), Expires: 99999, Now: 6000}))
	if n := h.f.auth.tokens.Len(); n != 1 {
		t.Errorf("%d tokens after every other expired, want 1", n)
	}
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthDisable}))
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthUserDelete, User: RootUser}))
	if n := h.f.auth.tokens.Len(); n != 0 {
		t.Errorf("%d tokens after their user's deletion, want 0", n)
	}
}

func TestAuthRoleDeleteTakesItFromUsers(t *testing.T) {
	h := buildState(t, authSetup)
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthRoleDelete, Role: "jobs"}))
	if h.f.Permitted("alice", command.PermWrite, "/app/jobs") {
		t.Error("a deleted role still grants")
	}
	users := h.f.Users()
	for _, u := range users {
		if u.Name == "alice" && (len(u.Roles) != 1 || u.Roles[0] != "app-read") {
			t.Errorf("alice's roles after the deletion: %v", u.Roles)
		}
	}
}

func TestAuthSnapshotRoundTrip(t *testing.T) {
	h := buildState(t, append(append([]command.Command{}, authSetup...), put("/app/x", "v")))
	data := snapshotBytes(t, h.f)
	if data[len(snapshotMagic)] != snapshotVersion+snapshotAuthRaise {
		t.Errorf("format version %d, want %d", data[len(snapshotMagic)], snapshotVersion+snapshotAuthRaise)
	}
	if bytes.Contains(data, []byte("alice-hash")) == false {
		t.Error("the snapshot lacks the password hash (it is the server's own state)")
	}
	back := restore(t, data)
	if back.Hash() != h.f.Hash() {
		t.Fatal("restored state differs")
	}
	if !back.AuthEnabled() || !back.Permitted("alice", command.PermWrite, "/app/jobs/1") {
		t.Error("auth state lost in the snapshot")
	}
	if user, ok := back.TokenUser(digest(1), 1500); !ok || user != "alice" {
		t.Error("token lost in the snapshot")
	}
	// A state without auth writes the format it wrote before.
	plain := buildState(t, []command.Command{put("/a", "v")})
	if v := snapshotBytes(t, plain.f)[len(snapshotMagic)]; v != snapshotVersion {
		t.Errorf("a state without auth is written in version %d, want %d", v, snapshotVersion)
	}
}

func TestAuthSnapshotDamage(t *testing.T) {
	data := snapshotBytes(t, buildState(t, authSetup).f)
	for n := 0; n < len(data); n++ {
		if _, err := ReadSnapshot(bytes.NewReader(data[:n])); err == nil {
			t.Fatalf("truncated at %d: accepted", n)
		}
	}
	checkEveryFlipRefused(t, data)
}

// checkEveryFlipRefused checks that flipping any bit 0 of a snapshot's
// bytes is refused with an offset.
func checkEveryFlipRefused(t *testing.T, data []byte) {
	t.Helper()
	for i := range data {
		flipped := bytes.Clone(data)
		flipped[i] ^= 0x01
		if _, err := ReadSnapshot(bytes.NewReader(flipped)); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		} else {
			corruptOffset(t, err)
		}
	}
}

func TestAuthSnapshotRejectsInvalidState(t *testing.T) {
	base := []frameSpec{header(5, 0, 0, 1), nodeFrame("", "/", 0, 0)}
	cases := map[string][]frameSpec{
		"empty auth":         {{frameAuth, append([]byte{0}, uvarints(0, 0, 0)...)}},
		"enabled no root":    {{frameAuth, append([]byte{1}, uvarints(0, 1, 0)...)}, {frameUser, append(uvarints(1), append([]byte("a"), uvarints(0, 0)...)...)}},
		"unknown user role":  {{frameAuth, append([]byte{0}, uvarints(0, 1, 0)...)}, {frameUser, append(uvarints(1), append([]byte("a"), append(uvarints(0, 1, 1), 'r')...)...)}},
		"token of no user":   {{frameAuth, append([]byte{0}, uvarints(0, 0, 1)...)}, {frameToken, append(append(uvarints(32), digest(1)...), append(uvarints(1), append([]byte("a"), uvarints(9)...)...)...)}},
		"bad enabled flag":   {{frameAuth, append([]byte{2}, uvarints(0, 0, 0)...)}},
		"grant without perm": {{frameAuth, append([]byte{0}, uvarints(1, 0, 0)...)}, {frameRole, append(uvarints(1), append([]byte("r"), append(uvarints(1), append([]byte{0}, append(uvarints(1), '/')...)...)...)...)}},
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			all := append(append(append([]frameSpec{}, base...), frames...), frameSpec{frameEnd, nil})
			_, err := ReadSnapshot(bytes.NewReader(handMade(snapshotVersion+snapshotAuthRaise, all...)))
			corruptOffset(t, err)
		})
	}
	// The same frames, valid, are accepted: the cases above fail for their
	// stated reason, not a framing mistake.
	valid := append(append([]frameSpec{}, base...),
		frameSpec{frameAuth, append([]byte{0}, uvarints(1, 1, 0)...)},
		frameSpec{frameRole, append(uvarints(1), append([]byte("r"), append(uvarints(1), append([]byte{1}, append(uvarints(1), '/')...)...)...)...)},
		frameSpec{frameUser, append(uvarints(1), append([]byte("a"), append(uvarints(0, 1, 1), 'r')...)...)},
		frameSpec{frameEnd, nil})
	f, err := ReadSnapshot(bytes.NewReader(handMade(snapshotVersion+snapshotAuthRaise, valid...)))
	if err != nil {
		t.Fatalf("valid hand-made auth snapshot: %v", err)
	}
	if !f.Permitted("a", command.PermRead, "/x") {
		t.Error("hand-made grant lost")
	}
}

func TestSessionOwnerSurvivesSnapshot(t *testing.T) {
	h := newHarness(t)
	create := createSession(5000)
	create.SessionID, create.Path = 77, "alice"
	h.mustApply(create)
	data := snapshotBytes(t, h.f)
	if v := data[len(snapshotMagic)]; v != snapshotVersion+snapshotAuthRaise {
		t.Fatalf("a state with an owned session is written in version %d", v)
	}
	back := restore(t, data)
	s, err := back.Session(77)
	if err != nil || s.Owner != "alice" {
		t.Fatalf("restored session = %+v, %v; want owner alice", s, err)
	}
	if back.Hash() != h.f.Hash() {
		t.Error("restored state differs")
	}
}
