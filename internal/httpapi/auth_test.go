package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// sendAs is send with a bearer token ("" for none).
func sendAs(t *testing.T, ctx context.Context, token, method, url, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = bytes.NewBufferString(body)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data
}

// mustOK sends and fails the test unless the answer is 200.
func mustOK(t *testing.T, ctx context.Context, token, method, url, body string) []byte {
	t.Helper()
	status, reply := sendAs(t, ctx, token, method, url, body)
	if status != http.StatusOK {
		t.Fatalf("%s %s %s: status %d %s", method, url, body, status, reply)
	}
	return reply
}

func login(t *testing.T, ctx context.Context, base, user, password string) string {
	t.Helper()
	reply := mustOK(t, ctx, "", "POST", base+"/v1/auth/login", fmt.Sprintf(`{"user":%q,"password":%q}`, user, password))
	var out api.LoginResponse
	if err := json.Unmarshal(reply, &out); err != nil || !strings.HasPrefix(out.Token, "latch_") {
		t.Fatalf("login reply %s: %v", reply, err)
	}
	return out.Token
}

type authFixture struct {
	base                              string
	root, reader, writer, otherWriter string // tokens
	writerSession                     string
}

// setUpAuth makes root, a reader and two writers of /app (and of the locks,
// elections under "app"), the node /app/x, a session of the writer, and
// enables auth.
func setUpAuth(t *testing.T, ctx context.Context, base string) authFixture {
	t.Helper()
	changes := []string{
		`{"action":"user_add","user":"root","password":"root-pw"}`,
		`{"action":"role_add","role":"r"}`,
		`{"action":"role_grant","role":"r","perm":"read","prefix":"/app"}`,
		`{"action":"role_grant","role":"r","perm":"read","prefix":"/locks"}`,
		`{"action":"role_grant","role":"r","perm":"read","prefix":"/elections"}`,
		`{"action":"role_add","role":"w"}`,
		`{"action":"role_grant","role":"w","perm":"write","prefix":"/app"}`,
		`{"action":"role_grant","role":"w","perm":"write","prefix":"/locks"}`,
		`{"action":"role_grant","role":"w","perm":"write","prefix":"/elections"}`,
		`{"action":"user_add","user":"reader","password":"reader-pw"}`,
		`{"action":"user_grant","user":"reader","role":"r"}`,
		`{"action":"user_add","user":"writer","password":"writer-pw"}`,
		`{"action":"user_grant","user":"writer","role":"w"}`,
		`{"action":"user_add","user":"other","password":"other-pw"}`,
		`{"action":"user_grant","user":"other","role":"w"}`,
	}
	for _, c := range changes {
		mustOK(t, ctx, "", "POST", base+"/v1/auth", c)
	}
	mustOK(t, ctx, "", "PUT", base+"/v1/kv/app/x", `{"value":"1"}`)
	mustOK(t, ctx, "", "POST", base+"/v1/auth", `{"action":"enable"}`)
	f := authFixture{base: base,
		root:        login(t, ctx, base, "root", "root-pw"),
		reader:      login(t, ctx, base, "reader", "reader-pw"),
		writer:      login(t, ctx, base, "writer", "writer-pw"),
		otherWriter: login(t, ctx, base, "other", "other-pw"),
	}
	var session api.Session
	if err := json.Unmarshal(mustOK(t, ctx, f.writer, "POST", base+"/v1/session/create", `{"timeout_ms":60000}`), &session); err != nil {
		t.Fatal(err)
	}
	f.writerSession = session.SessionID
	return f
}

// need is what an endpoint asks of its caller.
type need int

const (
	needUser  need = iota // any authenticated user
	needRead              // read on the path
	needWrite             // write on the path
	needAdmin             // admin on "/"
)

// endpointCase is one endpoint of the matrix. body and url may hold
// {session} (the writer's session) and {u} (unique per identity). ok is the
// status an allowed caller gets.
type endpointCase struct {
	name, method, url, body string
	need                    need
	session                 bool // acts on behalf of the writer's session
	ok                      int
}

var endpointCases = []endpointCase{
	{"get node", "GET", "/v1/kv/app/x", "", needRead, false, 200},
	{"list children", "GET", "/v1/kv/app?children=true", "", needRead, false, 200},
	{"put node", "PUT", "/v1/kv/app/{u}", `{"value":"v"}`, needWrite, false, 200},
	{"delete node", "DELETE", "/v1/kv/app/none-{u}", "", needWrite, false, 404},
	{"read many", "POST", "/v1/read", `{"reads":[{"path":"/app/x"}]}`, needRead, false, 200},
	{"txn", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/app/t-{u}","value":"v"}]}`, needWrite, false, 200},
	{"txn check", "POST", "/v1/txn", `{"ops":[{"op":"check","path":"/app/x"}]}`, needRead, false, 200},
	{"create session", "POST", "/v1/session/create", `{"timeout_ms":60000}`, needUser, false, 200},
	{"heartbeat", "POST", "/v1/session/heartbeat", `{"session_id":"{session}"}`, needUser, true, 200},
	{"get session", "GET", "/v1/session/{session}", "", needUser, true, 200},
	{"ephemeral put", "PUT", "/v1/kv/app/e-{u}?ephemeral=true&session_id={session}", `{"value":"v"}`, needWrite, true, 200},
	{"lock acquire", "POST", "/v1/lock/acquire", `{"name":"l-{u}","session_id":"{session}"}`, needWrite, true, 200},
	// An allowed caller reaches the endpoint's own answer: no such lock.
	{"lock state", "GET", "/v1/lock/none-{u}", "", needRead, false, 404},
	{"election join", "POST", "/v1/election/join", `{"role":"e-{u}","session_id":"{session}","value":"me"}`, needWrite, true, 200},
	{"election state", "GET", "/v1/election/none-{u}", "", needRead, false, 404},
	// An allowed caller reaches the endpoint's own answer: no event stream
	// is open for the session.
	{"watch", "POST", "/v1/watch", `{"path":"/app","recursive":true,"session_id":"{session}"}`, needRead, true, 409},
	{"list locks", "GET", "/v1/locks", "", needRead, false, 200},
	{"members", "GET", "/v1/cluster/members", "", needUser, false, 200},
	{"status", "GET", "/v1/status", "", needUser, false, 200},
	{"metrics", "GET", "/metrics", "", needUser, false, 200},
	{"list sessions", "GET", "/v1/sessions", "", needAdmin, false, 200},
	{"snapshot", "GET", "/v1/snapshot", "", needAdmin, false, 200},
	{"auth status", "GET", "/v1/auth", "", needAdmin, false, 200},
	{"auth change", "POST", "/v1/auth", `{"action":"role_add","role":"role-{u}"}`, needAdmin, false, 200},
}

// TestAuthMatrix drives every HTTP endpoint as no one, a reader, a writer,
// root, and another writer holding the writer's session id, and checks each
// status: 401 without credentials, 403 without the permission or for a
// session of another user, else the endpoint's own answer.
func TestAuthMatrix(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	identities := []struct {
		name, token string
		may         func(endpointCase) bool
	}{
		{"none", "", func(endpointCase) bool { return false }},
		{"reader", f.reader, func(e endpointCase) bool { return !e.session && (e.need == needUser || e.need == needRead) }},
		{"writer", f.writer, func(e endpointCase) bool { return e.need != needAdmin }},
		// Root may do everything, but a session belongs to its user alone.
		{"root", f.root, func(e endpointCase) bool { return !e.session }},
		{"other session", f.otherWriter, func(e endpointCase) bool { return !e.session && e.need != needAdmin }},
	}
	for _, id := range identities {
		for _, e := range endpointCases {
			t.Run(id.name+"/"+e.name, func(t *testing.T) {
				u := strings.ReplaceAll(id.name, " ", "-")
				expand := strings.NewReplacer("{session}", f.writerSession, "{u}", u)
				status, reply := sendAs(t, ctx, id.token, e.method, f.base+expand.Replace(e.url), expand.Replace(e.body))
				want := e.ok
				switch {
				case id.token == "":
					want = http.StatusUnauthorized
				case !id.may(e):
					want = http.StatusForbidden
				}
				if status != want {
					t.Errorf("status %d, want %d: %s", status, want, reply)
				}
			})
		}
	}
}

// TestSessionBelongsToItsUser: another user holding a leaked session id can
// neither heartbeat it, close it, nor write or lock with it; its owner can.
func TestSessionBelongsToItsUser(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	body := `{"session_id":"` + f.writerSession + `"}`
	for _, path := range []string{"/v1/session/heartbeat", "/v1/session/close"} {
		if status, reply := sendAs(t, ctx, f.otherWriter, "POST", f.base+path, body); status != http.StatusForbidden {
			t.Errorf("%s by another user: %d %s", path, status, reply)
		}
	}
	mustOK(t, ctx, f.writer, "POST", f.base+"/v1/session/heartbeat", body)
	mustOK(t, ctx, f.writer, "POST", f.base+"/v1/session/close", body)
}

// TestTokenRevocationAndPasswordChange: a logged-out token, a token of a
// user whose password changed, a wrong password and a garbage token are all
// 401; the new password works.
func TestTokenRevocationAndPasswordChange(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	read := f.base + "/v1/kv/app/x"
	mustOK(t, ctx, f.reader, "GET", read, "")
	mustOK(t, ctx, f.reader, "POST", f.base+"/v1/auth/logout", "")
	if status, _ := sendAs(t, ctx, f.reader, "GET", read, ""); status != http.StatusUnauthorized {
		t.Errorf("a logged-out token: status %d", status)
	}
	if status, _ := sendAs(t, ctx, "latch_garbage", "GET", read, ""); status != http.StatusUnauthorized {
		t.Errorf("a garbage token: status %d", status)
	}
	if status, _ := sendAs(t, ctx, "", "POST", f.base+"/v1/auth/login", `{"user":"writer","password":"nope"}`); status != http.StatusUnauthorized {
		t.Errorf("a wrong password: status %d", status)
	}
	mustOK(t, ctx, f.root, "POST", f.base+"/v1/auth", `{"action":"user_passwd","user":"writer","password":"new-pw"}`)
	if status, _ := sendAs(t, ctx, f.writer, "GET", read, ""); status != http.StatusUnauthorized {
		t.Errorf("a token from before a password change: status %d", status)
	}
	mustOK(t, ctx, login(t, ctx, f.base, "writer", "new-pw"), "GET", read, "")
}

// TestPasswordHashesNeverLeave: no reply of the API, admin listing included,
// holds a password hash (bcrypt's "$2a$" prefix).
func TestPasswordHashesNeverLeave(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	for _, url := range []string{"/v1/auth", "/v1/status", "/v1/kv/", "/v1/sessions", "/metrics"} {
		reply := mustOK(t, ctx, f.root, "GET", f.base+url, "")
		if bytes.Contains(reply, []byte("$2a$")) || bytes.Contains(reply, []byte("-pw")) {
			t.Errorf("GET %s leaks a password or its hash: %s", url, reply)
		}
	}
	var st api.AuthStatus
	if err := json.Unmarshal(mustOK(t, ctx, f.root, "GET", f.base+"/v1/auth", ""), &st); err != nil || !st.Enabled || len(st.Users) != 4 {
		t.Errorf("auth status %+v, %v", st, err)
	}
}

// TestAuthRefusalNamesItsOperation: a transaction's operation the caller
// may not perform refuses the transaction with 403 and that operation's
// failed_op, nothing applied; a multi-read's read the caller may not make
// fails on its own (permission_denied in its result) and the others are
// answered.
func TestAuthRefusalNamesItsOperation(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	status, reply := sendAs(t, ctx, f.writer, "POST", f.base+"/v1/txn",
		`{"ops":[{"op":"create","path":"/app/t1","value":"v"},{"op":"create","path":"/outside","value":"v"}]}`)
	var refusal api.TxnErrorBody
	if err := json.Unmarshal(reply, &refusal); err != nil || status != http.StatusForbidden ||
		refusal.FailedOp != 1 || refusal.Error.Code != api.CodePermissionDenied {
		t.Errorf("txn with a forbidden create: %d %s; want 403 permission_denied with failed_op 1", status, reply)
	}
	if status, reply := sendAs(t, ctx, f.writer, "GET", f.base+"/v1/kv/app/t1", ""); status != http.StatusNotFound {
		t.Errorf("the refused transaction's first create: %d %s, want 404", status, reply)
	}

	status, reply = sendAs(t, ctx, f.reader, "POST", f.base+"/v1/read", `{"reads":[{"path":"/app/x"},{"path":"/outside"}]}`)
	var reads api.ReadResults
	if err := json.Unmarshal(reply, &reads); err != nil || status != http.StatusOK || len(reads.Results) != 2 ||
		reads.Results[0].Node == nil || reads.Results[0].Node.Value != "1" ||
		reads.Results[1].Error == nil || reads.Results[1].Error.Code != api.CodePermissionDenied {
		t.Errorf("multi-read with a forbidden read: %d %s; want 200, /app/x, then permission_denied", status, reply)
	}
}
