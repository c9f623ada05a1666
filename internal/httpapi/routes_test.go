package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/httpapi"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// wildcard matches a route pattern's wildcard segment ({id}, {asset...}).
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// routeBodies are bodies each endpoint would act on, so that a request the
// query check let through would change something: {s} is a live session.
var routeBodies = map[string]string{
	"POST /v1/session/create":    `{"timeout_ms":10000}`,
	"POST /v1/session/heartbeat": `{"session_id":"{s}"}`,
	"POST /v1/session/close":     `{"session_id":"{s}"}`,
	"POST /v1/watch":             `{"path":"/w","session_id":"{s}"}`,
	"POST /v1/lock/acquire":      `{"name":"l","session_id":"{s}"}`,
	"POST /v1/lock/release":      `{"name":"l","session_id":"{s}"}`,
	"POST /v1/election/join":     `{"role":"r","session_id":"{s}","value":"v"}`,
	"POST /v1/election/resign":   `{"role":"r","session_id":"{s}"}`,
	"POST /v1/txn":               `{"ops":[{"op":"create","path":"/t","value":"v"}]}`,
	"POST /v1/read":              `{"reads":[{"path":"/"}]}`,
	"POST /v1/cluster/members":   `{"name":"n9","peer_url":"127.0.0.1:1","learner":true}`,
	"POST /v1/cluster/leader":    `{"to":"n1"}`,
	"POST /v1/auth/login":        `{"user":"u","password":"p"}`,
	"POST /v1/auth":              `{"action":"role_add","role":"x"}`,
}

// TestEveryEndpointRefusesUnknownParameters walks every route of the mux:
// each /v1 endpoint answers a parameter it does not take, a parameter it
// takes given twice, and a query url.ParseQuery cannot read whole with 400
// invalid_argument, and changes nothing; only the endpoints for generic
// tools (probes, scrapers, browsers) take any query. A route added to the
// table is checked here by itself; every endpoint docs/api.md names must
// be in the table (so none is served around it), and the reverse.
func TestEveryEndpointRefusesUnknownParameters(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := openSession(t, ctx, base)
	waitClientAddress(t, c)
	before := c.Nodes[0].Server.AppliedIndex()

	routes := httpapi.New(c.Nodes[0].Server, nil).Routes()
	generic := map[string]bool{}
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.Pattern, " ")
		if rt.AnyQuery {
			generic[path] = true
			if strings.HasPrefix(path, "/v1/") {
				t.Errorf("%s takes any query", rt.Pattern)
			}
			continue
		}
		if !strings.HasPrefix(path, "/v1/") {
			t.Errorf("route %s is outside /v1 and not for generic tools", rt.Pattern)
		}
		url := base + wildcard.ReplaceAllString(path, "0x1")
		body := strings.ReplaceAll(routeBodies[rt.Pattern], "{s}", session.SessionID)
		queries := map[string]string{
			"unknown parameter": "colour=red",
			"malformed query":   "a=1;b=2",
			"malformed escape":  "a=%zz",
		}
		for _, p := range rt.Params {
			queries["repeated "+p] = p + "=1&" + p + "=1"
			queries["unknown beside "+p] = p + "=1&colour=red"
		}
		for name, query := range queries {
			status, reply := send(t, ctx, method, url+"?"+query, body)
			var e api.ErrorBody
			if err := json.Unmarshal(reply, &e); err != nil || status != http.StatusBadRequest || e.Error.Code != api.CodeInvalidArgument {
				t.Errorf("%s ?%s (%s): status %d %s; want 400 invalid_argument", rt.Pattern, query, name, status, reply)
			}
		}
	}
	if after := c.Nodes[0].Server.AppliedIndex(); after != before {
		t.Errorf("requests with bad queries moved the applied index from %d to %d", before, after)
	}
	if status, reply := send(t, ctx, "GET", base+"/v1/session/"+session.SessionID+"?consistency=stale", ""); status != http.StatusOK {
		t.Errorf("the session read with its own parameter: %d %s", status, reply)
	}

	// The endpoints for generic tools take any query.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/ui", "/ui/app.js"} {
		if status, reply := send(t, ctx, "GET", base+path+"?colour=red&colour=blue", ""); status != http.StatusOK {
			t.Errorf("GET %s with a query of its own: %d %.200s; want 200", path, status, reply)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/ui", "/ui/{asset...}"} {
		if !generic[path] {
			t.Errorf("%s is not among the routes that take any query", path)
		}
	}

	// HEAD never opens an event stream, whatever its query: 405.
	for _, query := range []string{"", "?colour=red"} {
		url := base + "/v1/session/" + session.SessionID + "/events" + query
		if status, reply := send(t, ctx, "HEAD", url, ""); status != http.StatusMethodNotAllowed {
			t.Errorf("HEAD %s: %d %s; want 405", url, status, reply)
		}
	}

	// The node endpoints check their own parameters, per method.
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		for _, query := range []string{"colour=red", "a=1;b=2", "a=%zz"} {
			status, reply := send(t, ctx, method, base+"/v1/kv/k?"+query, `{"value":"v"}`)
			if status != http.StatusBadRequest {
				t.Errorf("%s /v1/kv/k?%s: %d %s; want 400", method, query, status, reply)
			}
		}
	}

	// docs/api.md's endpoints and the route table name the same ones.
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (GET|POST|PUT|DELETE) (/v1/[^ ?\n]*)`).FindAllStringSubmatch(string(doc), -1) {
		if !strings.HasPrefix(m[2], "/v1/kv/") {
			documented[m[1]+" "+wildcard.ReplaceAllString(m[2], "{}")] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range routes {
		if strings.Contains(rt.Pattern, " /v1/") {
			served[wildcard.ReplaceAllString(rt.Pattern, "{}")] = true
		}
	}
	for endpoint := range documented {
		if !served[endpoint] {
			t.Errorf("docs/api.md documents %s, which is not in the route table", endpoint)
		}
	}
	for endpoint := range served {
		if !documented[endpoint] {
			t.Errorf("the route table serves %s, which docs/api.md has no section for", endpoint)
		}
	}
}

// TestBodiesRefusedWhereNoneIsTaken: every GET and DELETE endpoint (the
// route table's, and the node endpoints, HEAD too) answers a request that
// carries a body with 400 invalid_argument and does nothing, where it
// ignored the body before; without one, or with an empty one, it answers
// as usual.
func TestBodiesRefusedWhereNoneIsTaken(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if status, reply := send(t, ctx, "PUT", base+"/v1/kv/k", `{"value":"v"}`); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, reply)
	}
	waitClientAddress(t, c)
	before := c.Nodes[0].Server.AppliedIndex()
	refused := func(method, url string) {
		t.Helper()
		status, reply := send(t, ctx, method, url, `{"force":true}`)
		var e api.ErrorBody
		if status != http.StatusBadRequest || (method != "HEAD" && (json.Unmarshal(reply, &e) != nil || e.Error.Code != api.CodeInvalidArgument)) {
			t.Errorf("%s %s with a body: %d %.200s; want 400 invalid_argument", method, url, status, reply)
		}
	}
	for _, rt := range httpapi.New(c.Nodes[0].Server, nil).Routes() {
		method, path, _ := strings.Cut(rt.Pattern, " ")
		if rt.AnyQuery || (method != "GET" && method != "DELETE") {
			continue
		}
		refused(method, base+wildcard.ReplaceAllString(path, "0x1"))
	}
	for _, method := range []string{"GET", "HEAD", "DELETE"} {
		refused(method, base+"/v1/kv/k")
	}
	if after := c.Nodes[0].Server.AppliedIndex(); after != before {
		t.Errorf("requests with bodies moved the applied index from %d to %d", before, after)
	}
	if status, reply := send(t, ctx, "GET", base+"/v1/kv/k", ""); status != http.StatusOK {
		t.Errorf("GET without a body: %d %s", status, reply)
	}
	// A body declared chunked, and empty (Go's client would not send one).
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "DELETE /v1/kv/k HTTP/1.1\r\nHost: latch\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("DELETE with an empty chunked body: %d; want 200", resp.StatusCode)
	}
}
