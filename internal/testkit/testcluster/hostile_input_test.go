package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// hostileReply is what a node answered a raw request.
type hostileReply struct {
	status int
	header http.Header
	body   []byte
}

// apiError decodes the reply's error envelope, failing the test if it is not one.
func (r hostileReply) apiError(t *testing.T) api.Error {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("status %d, body %q: not the JSON error envelope", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error reply has Content-Type %q, want application/json", ct)
	}
	if want := e.Error.Code.Status(); r.status != want {
		t.Errorf("code %s came with status %d, want %d", e.Error.Code, r.status, want)
	}
	return e.Error
}

// hostileCall sends body (none if empty) exactly as given.
func hostileCall(t *testing.T, ctx context.Context, method, u, body string) hostileReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the reply: %v", method, u, err)
	}
	return hostileReply{status: resp.StatusCode, header: resp.Header, body: data}
}

// rawExchange writes request on a fresh TCP connection to base and reads one reply.
func rawExchange(t *testing.T, base, request string) hostileReply {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the reply to %q: %v", request, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return hostileReply{status: resp.StatusCode, header: resp.Header, body: data}
}

// TestOverflowingNumbersRefused (issue 11 item 7): numbers beyond 2^53-1 in
// a body or a query are refused with 400 instead of wrapping; a timeout_ms
// above the maximum that fits is clamped to the maximum (it used to wrap to
// the minimum); a huge request_seq no longer poisons the session.
func TestOverflowingNumbersRefused(t *testing.T) {
	c := New(t, 1, Steady(Options{MinSessionTTL: 2 * time.Second, MaxSessionTTL: 60 * time.Second}))
	ctx := ctxT(t, 60*time.Second)
	base := c.URL(0)

	t.Run("timeout_ms that overflowed a duration is clamped to the maximum", func(t *testing.T) {
		for _, ms := range []string{"9223372036855", "9007199254740991"} {
			r := hostileCall(t, ctx, "POST", base+"/v1/session/create", `{"timeout_ms":`+ms+`}`)
			var s api.Session
			if err := json.Unmarshal(r.body, &s); r.status != 200 || err != nil || s.TimeoutMs != 60000 {
				t.Errorf("timeout_ms %s: status %d %s; want the maximum, 60000", ms, r.status, r.body)
			}
		}
	})

	s := createSession(t, ctx, base, 60*time.Second) // no expiry moves the applied index mid-test
	if _, err := Put(ctx, base, "/exists", "v", ""); err != nil {
		t.Fatal(err)
	}
	c.WaitAnnounced(10 * time.Second) // the applied index then moves only by the requests below
	tests := []struct{ name, method, path, body, want string }{
		{"timeout_ms 2^64-1", "POST", "/v1/session/create", `{"timeout_ms":18446744073709551615}`, "timeout_ms=18446744073709551615"},
		{"timeout_ms 2^53", "POST", "/v1/session/create", `{"timeout_ms":9007199254740992}`, "timeout_ms"},
		{"timeout_ms negative", "POST", "/v1/session/create", `{"timeout_ms":-1}`, "timeout_ms=-1"},
		{"timeout_ms fraction", "POST", "/v1/session/create", `{"timeout_ms":1.5}`, "timeout_ms=1.5"},
		{"timeout_ms exponent", "POST", "/v1/session/create", `{"timeout_ms":1e3}`, "timeout_ms=1e3"},
		{"request_seq 2^64-1", "PUT", "/v1/kv/seq?session_id=" + s.SessionID + "&request_seq=18446744073709551615", `{"value":"x"}`, "request_seq"},
		{"request_seq 2^53", "PUT", "/v1/kv/seq?session_id=" + s.SessionID + "&request_seq=9007199254740992", `{"value":"x"}`, "request_seq"},
		{"request_seq on delete", "DELETE", "/v1/kv/exists?session_id=" + s.SessionID + "&request_seq=18446744073709551615", "", "request_seq"},
		{"prev_version 2^64-1", "PUT", "/v1/kv/exists?prev_version=18446744073709551615", `{"value":"x"}`, "prev_version"},
		{"min_index 2^64-1", "GET", "/v1/kv/exists?min_index=18446744073709551615", "", "min_index"},
		{"min_index on a session", "GET", "/v1/session/" + s.SessionID + "?min_index=9007199254740992", "", "min_index"},
		{"wait_ms 2^64-1", "POST", "/v1/lock/acquire", `{"name":"l","session_id":"` + s.SessionID + `","wait_ms":18446744073709551615}`, "wait_ms"},
		{"fencing_token 2^64-1", "POST", "/v1/lock/release", `{"name":"l","session_id":"` + s.SessionID + `","fencing_token":18446744073709551615}`, "fencing_token"},
		{"known_index 2^64-1", "POST", "/v1/watch", `{"path":"/exists","session_id":"` + s.SessionID + `","known_index":18446744073709551615}`, "known_index"},
		{"known_index negative", "POST", "/v1/watch", `{"path":"/exists","session_id":"` + s.SessionID + `","known_index":-5}`, "known_index"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			was := c.Nodes[0].Server.AppliedIndex()
			e := hostileCall(t, ctx, tt.method, base+tt.path, tt.body).apiError(t)
			if e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("%s %s %s: %v; want invalid_argument naming %s", tt.method, tt.path, tt.body, e.Message, tt.want)
			}
			if now := c.Nodes[0].Server.AppliedIndex(); now != was {
				t.Errorf("a refused request moved the applied index from %d to %d", was, now)
			}
		})
	}

	t.Run("session still takes ordinary request_seq", func(t *testing.T) {
		for seq := uint64(1); seq <= 3; seq++ {
			if _, err := SessionPut(ctx, base, "/seq", "ok", SessionWrite{SessionID: s.SessionID, RequestSeq: seq}); err != nil {
				t.Fatalf("request_seq %d after refused huge ones: %v", seq, err)
			}
		}
	})
}

// TestStrictBodies (issue 11 item 8): a PUT without a value, with a null
// value, invalid UTF-8, lone surrogates, keys in another case, duplicate
// keys or trailing data is refused with 400 and changes nothing; an explicit
// "" and a proper surrogate pair are stored exactly.
func TestStrictBodies(t *testing.T) {
	c := New(t, 1, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	base := c.URL(0)
	if _, err := Put(ctx, base, "/x", "orig", ""); err != nil {
		t.Fatal(err)
	}
	s := createSession(t, ctx, base, 60*time.Second) // no expiry moves the applied index mid-test
	c.WaitAnnounced(10 * time.Second)                // the applied index then moves only by the requests below
	tests := []struct{ name, method, path, body, want string }{
		{"no body", "PUT", "/v1/kv/x", "", `"value"`},
		{"empty object", "PUT", "/v1/kv/x", `{}`, `"value"`},
		{"null value", "PUT", "/v1/kv/x", `{"value":null}`, "value is null"},
		{"null body", "PUT", "/v1/kv/x", `null`, "JSON object"},
		{"array body", "PUT", "/v1/kv/x", `["x"]`, "JSON object"},
		{"string body", "PUT", "/v1/kv/x", `"x"`, "JSON object"},
		{"number value", "PUT", "/v1/kv/x", `{"value":5}`, "value must be a string"},
		{"invalid UTF-8", "PUT", "/v1/kv/x", "{\"value\":\"a\xffb\"}", "UTF-8"},
		{"lone high surrogate", "PUT", "/v1/kv/x", `{"value":"\ud800"}`, `\ud800`},
		{"lone low surrogate", "PUT", "/v1/kv/x", `{"value":"a\udc00b"}`, `\udc00`},
		{"high surrogate then letter", "PUT", "/v1/kv/x", `{"value":"\ud83dx"}`, `\ud83d`},
		{"key in another case", "PUT", "/v1/kv/x", `{"Value":"x"}`, `"Value"`},
		{"duplicate key", "PUT", "/v1/kv/x", `{"value":"x","value":"y"}`, "twice"},
		{"unknown field", "PUT", "/v1/kv/x", `{"value":"x","ttl":1}`, `"ttl"`},
		{"trailing data", "PUT", "/v1/kv/x", `{"value":"x"} x`, "after the object"},
		{"two objects", "PUT", "/v1/kv/x", `{"value":"x"}{"value":"y"}`, "after the object"},
		{"session key case", "POST", "/v1/session/heartbeat", `{"SESSION_ID":"` + s.SessionID + `"}`, `"SESSION_ID"`},
		{"duplicate session key", "POST", "/v1/session/close", `{"session_id":"` + s.SessionID + `","session_id":"0x1"}`, "twice"},
		{"watch path case", "POST", "/v1/watch", `{"Path":"/x","session_id":"` + s.SessionID + `"}`, `"Path"`},
		{"lock name null", "POST", "/v1/lock/acquire", `{"name":null,"session_id":"` + s.SessionID + `"}`, "name is null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			was := c.Nodes[0].Server.AppliedIndex()
			e := hostileCall(t, ctx, tt.method, base+tt.path, tt.body).apiError(t)
			if e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("%s %s %q: %s %q; want invalid_argument mentioning %s", tt.method, tt.path, tt.body, e.Code, e.Message, tt.want)
			}
			if now := c.Nodes[0].Server.AppliedIndex(); now != was {
				t.Errorf("a refused request moved the applied index from %d to %d", was, now)
			}
		})
	}
	if n, err := Get(ctx, base, "/x", api.Linearizable); err != nil || n.Value != "orig" || n.Version != 1 {
		t.Fatalf("after the refused PUTs /x is %+v, %v; want value orig at version 1", n, err)
	}
	for _, ok := range []struct{ body, want string }{
		{`{"value":""}`, ""},
		{`{"value":"\ud83d\ude00 \u00e9"}`, "\U0001F600 é"},
		{"{\"value\":\"caf\u00e9\"}", "café"},
	} {
		if r := hostileCall(t, ctx, "PUT", base+"/v1/kv/x", ok.body); r.status != 200 {
			t.Fatalf("PUT %s: status %d %s", ok.body, r.status, r.body)
		}
		if n, err := Get(ctx, base, "/x", api.Linearizable); err != nil || n.Value != ok.want {
			t.Fatalf("after PUT %s /x is %+v, %v; want value %q", ok.body, n, err, ok.want)
		}
	}
}

// TestPrevVersionZeroMeansNone (issue 11 item 12): prev_version=0 means the
// node must not exist, as the docs say, for PUT and DELETE alike.
func TestPrevVersionZeroMeansNone(t *testing.T) {
	c := New(t, 1, Steady(Options{}))
	ctx := ctxT(t, 30*time.Second)
	base := c.URL(0)
	if r := hostileCall(t, ctx, "PUT", base+"/v1/kv/new?prev_version=0", `{"value":"a"}`); r.status != 200 {
		t.Fatalf("create with prev_version=0: status %d %s", r.status, r.body)
	}
	e := hostileCall(t, ctx, "PUT", base+"/v1/kv/new?prev_version=0", `{"value":"b"}`).apiError(t)
	if e.Code != api.CodePreconditionFailed {
		t.Fatalf("second create with prev_version=0: %v, want precondition_failed", e)
	}
	if n, err := Get(ctx, base, "/new", api.Linearizable); err != nil || n.Value != "a" {
		t.Fatalf("/new is %+v, %v; want value a", n, err)
	}
}

// TestErrorsConsistent (issue 11, errors and contract consistency): a wrong
// method is 405 with Allow on every route, HEAD works where GET does, the
// requests net/http refuses itself get the JSON envelope, messages say what
// is wrong, and every session-scoped lookup of a gone session is 410.
func TestErrorsConsistent(t *testing.T) {
	c := New(t, 1, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	base := c.URL(0)
	if _, err := Put(ctx, base, "/exists", "v", ""); err != nil {
		t.Fatal(err)
	}
	closed := createSession(t, ctx, base, 10*time.Second)
	if err := Do(ctx, "POST", base, "/v1/session/close", nil, api.SessionRequest{SessionID: closed.SessionID}, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, body string
		code                     api.Code
		allow, want              string
	}{
		{"POST a node", "POST", "/v1/kv/x", `{"value":"x"}`, api.CodeMethodNotAllowed, "GET, HEAD, PUT, DELETE", "POST /v1/kv/x"},
		{"PATCH a node", "PATCH", "/v1/kv/x", `{"value":"x"}`, api.CodeMethodNotAllowed, "GET, HEAD, PUT, DELETE", "PATCH"},
		{"POST status", "POST", "/v1/status", "", api.CodeMethodNotAllowed, "GET, HEAD", "use GET or HEAD"},
		{"PUT members", "PUT", "/v1/cluster/members", "", api.CodeMethodNotAllowed, "GET, HEAD, POST", "PUT /v1/cluster/members"},
		{"GET session create", "GET", "/v1/session/create", "", api.CodeMethodNotAllowed, "POST", "GET /v1/session/create: method not allowed; use POST"},
		{"GET heartbeat", "GET", "/v1/session/heartbeat", "", api.CodeMethodNotAllowed, "POST", "use POST"},
		{"DELETE healthz", "DELETE", "/healthz", "", api.CodeMethodNotAllowed, "GET, HEAD", "DELETE /healthz"},
		{"garbage but valid method", "FROB", "/v1/status", "", api.CodeMethodNotAllowed, "GET, HEAD", "FROB"},
		{"HEAD an event stream", "HEAD", "/v1/session/" + closed.SessionID + "/events", "", api.CodeMethodNotAllowed, "GET", ""},
		{"POST an event stream", "POST", "/v1/session/" + closed.SessionID + "/events", "", api.CodeMethodNotAllowed, "GET", "use GET"},
		{"kv without a path", "GET", "/v1/kv", "", api.CodeInvalidArgument, "", "missing node path"},
		{"watch without session_id", "POST", "/v1/watch", `{"path":"/exists"}`, api.CodeInvalidArgument, "", "session_id is required"},
		{"watch with a bad session_id", "POST", "/v1/watch", `{"path":"/exists","session_id":"zz"}`, api.CodeInvalidArgument, "", `session_id "zz" is not an id`},
		{"lock without session_id", "POST", "/v1/lock/acquire", `{"name":"l"}`, api.CodeInvalidArgument, "", "session_id is required"},
		{"malformed session in path", "GET", "/v1/session/nope", "", api.CodeInvalidArgument, "", `session id "nope" is not an id`},
		{"malformed watch id", "DELETE", "/v1/watch/nope?session_id=" + closed.SessionID, "", api.CodeInvalidArgument, "", `watch id "nope"`},
		{"GET closed session", "GET", "/v1/session/" + closed.SessionID, "", api.CodeSessionExpired, "", closed.SessionID},
		{"GET never seen session", "GET", "/v1/session/0x00000000000000ff", "", api.CodeSessionExpired, "", "0x00000000000000ff"},
		{"heartbeat closed session", "POST", "/v1/session/heartbeat", `{"session_id":"` + closed.SessionID + `"}`, api.CodeSessionExpired, "", closed.SessionID},
		{"close closed session", "POST", "/v1/session/close", `{"session_id":"` + closed.SessionID + `"}`, api.CodeSessionExpired, "", ""},
		{"release by closed session", "POST", "/v1/lock/release", `{"name":"l","session_id":"` + closed.SessionID + `"}`, api.CodeSessionExpired, "", closed.SessionID},
		{"resign by closed session", "POST", "/v1/election/resign", `{"role":"r","session_id":"` + closed.SessionID + `"}`, api.CodeSessionExpired, "", closed.SessionID},
		{"unknown endpoint", "GET", "/v2/status", "", api.CodeNotFound, "", "no such endpoint"},
		{"unclean path", "GET", "/v1//status", "", api.CodeNotFound, "", "no such endpoint"},
		{"trailing slash", "GET", "/v1/status/", "", api.CodeNotFound, "", "no such endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hostileCall(t, ctx, tt.method, base+tt.path, tt.body)
			if tt.method == http.MethodHead { // a reply without a body
				if r.status != tt.code.Status() || r.header.Get("Allow") != tt.allow {
					t.Fatalf("HEAD %s: status %d, Allow %q; want %d, %q", tt.path, r.status, r.header.Get("Allow"), tt.code.Status(), tt.allow)
				}
				return
			}
			e := r.apiError(t)
			if e.Code != tt.code || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("%s %s: %s %q; want %s mentioning %q", tt.method, tt.path, e.Code, e.Message, tt.code, tt.want)
			}
			if got := r.header.Get("Allow"); tt.allow != "" && got != tt.allow {
				t.Errorf("Allow: %q, want %q", got, tt.allow)
			}
		})
	}

	t.Run("HEAD works where GET does", func(t *testing.T) {
		holder := createSession(t, ctx, base, 10*time.Second)
		if _, err := acquireLock(ctx, base, "l", holder.SessionID, 0); err != nil {
			t.Fatalf("acquire lock l: %v", err)
		}
		for _, path := range []string{"/v1/kv/exists", "/v1/status", "/healthz", "/v1/cluster/members", "/v1/lock/l"} {
			r := hostileCall(t, ctx, "HEAD", base+path, "")
			if r.status != 200 || len(r.body) != 0 || r.header.Get(api.HeaderIndex) == "" {
				t.Errorf("HEAD %s: status %d, body %q, index %q", path, r.status, r.body, r.header.Get(api.HeaderIndex))
			}
		}
	})

	raw := []struct{ name, request, want string }{
		{"malformed escape", "GET /v1/kv/bad%zz HTTP/1.1\r\nHost: x\r\n\r\n", `malformed request: malformed URL "/v1/kv/bad%zz": invalid URL escape "%zz"`},
		{"garbage method", "G@T /v1/status HTTP/1.1\r\nHost: x\r\n\r\n", `malformed request: invalid method "G@T"`},
		{"missing Host", "GET /v1/status HTTP/1.1\r\n\r\n", "Host"},
		{"bad header", "GET /v1/status HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", "header"},
	}
	for _, tt := range raw {
		t.Run(tt.name, func(t *testing.T) {
			r := rawExchange(t, base, tt.request)
			if e := r.apiError(t); e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("%q: %s %q; want invalid_argument mentioning %q", tt.request, e.Code, e.Message, tt.want)
			}
		})
	}
	t.Run("oversized headers", func(t *testing.T) {
		request := "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n"
		if e := rawExchange(t, base, request).apiError(t); e.Code != api.CodeTooLarge {
			t.Fatalf("80 KiB header: %v, want too_large", e)
		}
	})
}

// TestNodeJSONHasEveryField (issue 11): a node's JSON always carries value,
// ephemeral and owner_handle, also when they are empty; a PUT's reply has
// the fields the contract lists.
func TestNodeJSONHasEveryField(t *testing.T) {
	c := New(t, 1, Steady(Options{}))
	ctx := ctxT(t, 30*time.Second)
	base := c.URL(0)
	put := hostileCall(t, ctx, "PUT", base+"/v1/kv/empty", `{"value":""}`)
	if got := jsonKeys(t, put.body); got != "created_index index modified_index path version" {
		t.Errorf("PUT reply keys %q (%s)", got, put.body)
	}
	get := hostileCall(t, ctx, "GET", base+"/v1/kv/empty", "")
	// created_at_ms and modified_at_ms: present once the log stamped a time
	// (every write of this binary); cversion: omitted while 0.
	if got := jsonKeys(t, get.body); got != "children_count created_at_ms created_index ephemeral index modified_at_ms modified_index owner_handle path value version" {
		t.Fatalf("GET reply keys %q (%s)", got, get.body)
	}
	var fields map[string]any
	if err := json.Unmarshal(get.body, &fields); err != nil {
		t.Fatalf("GET reply %s: %v", get.body, err)
	}
	if fields["value"] != "" || fields["ephemeral"] != false || fields["owner_handle"] != "" {
		t.Errorf("persistent empty node: %s", get.body)
	}
	s := createSession(t, ctx, base, 10*time.Second)
	if _, err := SessionPut(ctx, base, "/eph", "", SessionWrite{SessionID: s.SessionID, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	get = hostileCall(t, ctx, "GET", base+"/v1/kv/eph", "")
	fields = nil
	if err := json.Unmarshal(get.body, &fields); err != nil {
		t.Fatalf("GET reply of the ephemeral node %s: %v", get.body, err)
	}
	if fields["ephemeral"] != true || fields["owner_handle"] != s.SessionHandle || fields["value"] != "" {
		t.Errorf("ephemeral node of %s: %s", s.SessionID, get.body)
	}
}

// jsonKeys returns the sorted top-level keys of a JSON object, space-separated.
func jsonKeys(t *testing.T, data []byte) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, " ")
}
