package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// maxLoginBody bounds a login request: a user name and a password.
const maxLoginBody = 4096

// withCredentials puts what r presents (the verified certificate's name, a
// bearer token, the source address) in ctx, r's context, for the server's
// one authorization check.
func withCredentials(ctx context.Context, r *http.Request, c Caller) context.Context {
	creds := server.Credentials{CertName: c.CertName, Token: bearerToken(r), Source: sourceAddress(r.RemoteAddr)}
	return server.WithCredentials(ctx, creds)
}

// sourceAddress is the host of a remote address "host:port".
func sourceAddress(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// bearerToken returns the token of an "Authorization: Bearer" header, or "".
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	var req api.LoginRequest
	if err := h.decodeBodyLimit(w, r, &req, maxLoginBody); err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.Login(r.Context(), req.User, req.Password)
	h.replyIn(w, metaShard, out, out.Index, err)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if err := h.decodeNoBody(w, r); err != nil {
		h.writeError(w, err)
		return
	}
	index, err := h.server.Logout(r.Context())
	h.replyIn(w, metaShard, api.AuthChanged{Index: index}, index, err)
}

func (h *Handler) authStatus(w http.ResponseWriter, r *http.Request) {
	out, err := h.server.AuthState(r.Context())
	h.replyIn(w, metaShard, out, out.Index, err)
}

func (h *Handler) changeAuth(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r, maxLoginBody)
	var req api.AuthChange
	if err == nil {
		err = decodeStrict(data, &req)
	}
	if err == nil {
		err = checkAuthFields(data, req.Action)
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	index, err := h.server.ChangeAuth(r.Context(), req)
	h.replyIn(w, metaShard, api.AuthChanged{Index: index}, index, err)
}

// authActionFields are the fields each action of POST /v1/auth takes
// beside "action" (docs/api.md's table); the body type has every action's.
var authActionFields = map[string][]string{
	"enable": nil, "disable": nil,
	"user_add": {"user", "password"}, "user_delete": {"user"}, "user_passwd": {"user", "password"},
	"user_grant": {"user", "role"}, "user_revoke": {"user", "role"},
	"role_add": {"role"}, "role_delete": {"role"},
	"role_grant": {"role", "perm", "prefix"}, "role_revoke": {"role", "perm", "prefix"},
	"quota_set": {"prefix", "max_nodes", "max_bytes"}, "quota_clear": {"prefix"},
}

// checkAuthFields refuses a field of api.AuthChange that action does not
// take, which would otherwise be ignored (a password sent with role_add).
// data is a body decodeStrict accepted; an unknown action is the server's
// to refuse.
func checkAuthFields(data []byte, action string) error {
	allowed, known := authActionFields[action]
	if !known {
		return nil
	}
	var given map[string]json.RawMessage
	if err := json.Unmarshal(data, &given); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	for _, field := range jsonFields(reflect.TypeOf(api.AuthChange{})) { // in a fixed order
		if _, ok := given[field]; ok && field != "action" && !contains(allowed, field) {
			takes := "action"
			if len(allowed) > 0 {
				takes += ", " + strings.Join(allowed, ", ")
			}
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s takes no field %q (its fields: %s)", action, field, takes)
		}
	}
	return nil
}

// gated wraps an endpoint that has no server method of its own (status,
// cluster health, /metrics): with auth enabled it needs an authenticated
// user.
func (h *Handler) gated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.server.Authenticate(r.Context()); err != nil {
			h.writeError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// AdminGated returns next behind the check a cluster-wide admin call (a
// backup, a membership change) passes: with auth enabled, a request that
// proves no user (a bearer token, or a client certificate naming one) is
// refused with 401, and one whose user does not hold admin on "/" with
// 403, in the API's envelope. It is for endpoints served beside the API on
// the client port, as latchd's /debug/pprof/, whose CPU profile and trace
// cost the member CPU for as long as a caller asks.
func (h *Handler) AdminGated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = withCaller(r)
		if err := h.server.AuthorizeAdmin(r.Context(), "/"); err != nil {
			h.writeError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorizeSession checks that the request's user owns session, for calls
// whose server method takes no context.
func (h *Handler) authorizeSession(ctx context.Context, session uint64) error {
	return h.server.AuthorizeSession(ctx, session)
}
