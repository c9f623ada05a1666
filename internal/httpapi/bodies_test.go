package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestEachCallTakesOnlyItsFields: calls that share a body type in the Go
// client (lock acquire and release, election join and resign) and the
// actions of POST /v1/auth take only the fields docs/api.md lists for
// them; another is 400 invalid_argument naming it, and changes nothing.
// The endpoints that take no body (logout, promote) take nothing or {}
// and refuse anything else. Each call with its own fields still works.
func TestEachCallTakesOnlyItsFields(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openSession(t, ctx, base).SessionID
	waitClientAddress(t, c)
	refused := []struct{ path, body, field string }{
		{"/v1/lock/acquire", `{"name":"l","session_id":"` + s + `","fencing_token":7}`, "fencing_token"},
		{"/v1/lock/release", `{"name":"l","session_id":"` + s + `","wait_ms":100}`, "wait_ms"},
		{"/v1/lock/acquire", `{"role":"l","session_id":"` + s + `"}`, "role"},
		{"/v1/election/resign", `{"role":"r","session_id":"` + s + `","value":"v"}`, "value"},
		{"/v1/election/join", `{"role":"r","session_id":"` + s + `","wait_ms":100}`, "wait_ms"},
		{"/v1/election/join", `{"name":"r","session_id":"` + s + `"}`, "name"},
		{"/v1/auth", `{"action":"role_add","role":"x","password":"pw"}`, "password"},
		{"/v1/auth", `{"action":"enable","user":"root"}`, "user"},
		{"/v1/auth", `{"action":"user_add","user":"u","role":"x"}`, "role"},
		{"/v1/auth", `{"action":"quota_clear","prefix":"/q","max_nodes":3}`, "max_nodes"},
		{"/v1/auth", `{"action":"role_grant","role":"x","perm":"read","prefix":"/a","user":""}`, "user"},
		{"/v1/auth/logout", `{"token":"latch_x"}`, "token"},
		{"/v1/cluster/members/n1/promote", `{"learner":false}`, "learner"},
	}
	before := c.Nodes[0].Server.AppliedIndex()
	for _, tt := range refused {
		status, reply := send(t, ctx, "POST", base+tt.path, tt.body)
		var e api.ErrorBody
		if err := json.Unmarshal(reply, &e); err != nil || status != http.StatusBadRequest ||
			e.Error.Code != api.CodeInvalidArgument || !strings.Contains(e.Error.Message, `"`+tt.field+`"`) {
			t.Errorf("POST %s %s: %d %s; want 400 invalid_argument naming %q", tt.path, tt.body, status, reply, tt.field)
		}
	}
	for _, path := range []string{"/v1/auth/logout", "/v1/cluster/members/n1/promote"} {
		for _, body := range []string{"garbage", "[]", `{"a":1}`, `{}{}`} {
			status, reply := send(t, ctx, "POST", base+path, body)
			if status != http.StatusBadRequest || !strings.Contains(string(reply), `"invalid_argument"`) {
				t.Errorf("POST %s %s: %d %s; want 400 invalid_argument", path, body, status, reply)
			}
		}
	}
	if after := c.Nodes[0].Server.AppliedIndex(); after != before {
		t.Errorf("refused bodies moved the applied index from %d to %d", before, after)
	}

	// Nothing or {} reaches the endpoint's own answer: no token to revoke,
	// n1 is not a learner.
	for _, body := range []string{"", "{}", " { } "} {
		if status, reply := send(t, ctx, "POST", base+"/v1/auth/logout", body); status != http.StatusUnauthorized {
			t.Errorf("logout %q without a token: %d %s; want 401", body, status, reply)
		}
		if status, reply := send(t, ctx, "POST", base+"/v1/cluster/members/n1/promote", body); status != http.StatusConflict {
			t.Errorf("promote %q of a voter: %d %s; want 409", body, status, reply)
		}
	}
	// Each call with its own fields.
	for _, call := range []struct{ path, body string }{
		{"/v1/lock/acquire", `{"name":"l","session_id":"` + s + `","wait_ms":100}`},
		{"/v1/lock/release", `{"name":"l","session_id":"` + s + `","fencing_token":0}`},
		{"/v1/election/join", `{"role":"r","session_id":"` + s + `","value":"v"}`},
		{"/v1/election/resign", `{"role":"r","session_id":"` + s + `"}`},
		{"/v1/auth", `{"action":"role_add","role":"x"}`},
		{"/v1/auth", `{"action":"role_grant","role":"x","perm":"read","prefix":"/a"}`},
		{"/v1/auth", `{"action":"user_add","user":"u","password":"pw"}`},
		{"/v1/auth", `{"action":"user_grant","user":"u","role":"x"}`},
		{"/v1/auth", `{"action":"quota_set","prefix":"/q","max_nodes":3}`},
	} {
		if status, reply := send(t, ctx, "POST", base+call.path, call.body); status != http.StatusOK {
			t.Errorf("POST %s %s: %d %s; want 200", call.path, call.body, status, reply)
		}
	}
}
