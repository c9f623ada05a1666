package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// waitClientAddress waits until c's one server has recorded its client
// address, which it does through the log once after it starts: a test that
// checks the applied index stands still starts after it.
func waitClientAddress(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	if !testcluster.WaitFor(10*time.Second, func() bool {
		m := c.Nodes[0].Server.Members()
		return len(m.Members) == 1 && m.Members[0].ClientURL != ""
	}) {
		t.Fatal("server never announced its client address")
	}
}

// TestBadInputChangesNothing sends malformed requests and checks each gets
// docs/api.md's error code and that none of them reached the log.
func TestBadInputChangesNothing(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testcluster.Put(ctx, base, "/exists", "v", ""); err != nil {
		t.Fatal(err)
	}
	waitClientAddress(t, c)
	before := c.Nodes[0].Server.AppliedIndex()
	big := strings.Repeat("x", 1025)
	tests := []struct {
		name, method, path, body string
		code                     api.Code
	}{
		{"dotdot", "PUT", "/v1/kv/a/../b", `{"value":"x"}`, api.CodeInvalidArgument},
		{"double slash", "PUT", "/v1/kv/a//b", `{"value":"x"}`, api.CodeInvalidArgument},
		{"trailing slash", "PUT", "/v1/kv/a/", `{"value":"x"}`, api.CodeInvalidArgument},
		{"unknown parameter", "PUT", "/v1/kv/a?colour=red", `{"value":"x"}`, api.CodeInvalidArgument},
		{"repeated parameter", "PUT", "/v1/kv/a?ephemeral=false&ephemeral=false", `{"value":"x"}`, api.CodeInvalidArgument},
		{"bad prev_version", "PUT", "/v1/kv/a?prev_version=soon", `{"value":"x"}`, api.CodeInvalidArgument},
		{"bad bool", "PUT", "/v1/kv/a?sequential=yes", `{"value":"x"}`, api.CodeInvalidArgument},
		{"bad session id", "PUT", "/v1/kv/a?session_id=xyz", `{"value":"x"}`, api.CodeInvalidArgument},
		{"request_seq without session", "PUT", "/v1/kv/a?request_seq=3", `{"value":"x"}`, api.CodeInvalidArgument},
		{"ephemeral without session", "PUT", "/v1/kv/a?ephemeral=true", `{"value":"x"}`, api.CodeInvalidArgument},
		{"bad json", "PUT", "/v1/kv/a", `{"value":`, api.CodeInvalidArgument},
		{"unknown field", "PUT", "/v1/kv/a", `{"value":"x","ttl":3}`, api.CodeInvalidArgument},
		{"two values", "PUT", "/v1/kv/a", `{"value":"x"}{"value":"y"}`, api.CodeInvalidArgument},
		{"value too large", "PUT", "/v1/kv/a", `{"value":"` + big + `"}`, api.CodeTooLarge},
		{"body too large", "PUT", "/v1/kv/a", `{"value":"` + strings.Repeat("y", 20000) + `"}`, api.CodeTooLarge},
		{"bad consistency", "GET", "/v1/kv/exists?consistency=eventual", "", api.CodeInvalidArgument},
		{"bad min_index", "GET", "/v1/kv/exists?min_index=-1", "", api.CodeInvalidArgument},
		{"missing node", "GET", "/v1/kv/missing", "", api.CodeNotFound},
		{"session timeout body", "POST", "/v1/session/create", `{"timeout_ms":"soon"}`, api.CodeInvalidArgument},
		{"heartbeat unknown session", "POST", "/v1/session/heartbeat", `{"session_id":"0x00000000000000ff"}`, api.CodeSessionExpired},
		{"heartbeat no id", "POST", "/v1/session/heartbeat", `{}`, api.CodeInvalidArgument},
		{"lock bad name", "POST", "/v1/lock/acquire", `{"name":"a/b","session_id":"0x1"}`, api.CodeInvalidArgument},
		{"watch bad path", "POST", "/v1/watch", `{"path":"nope","session_id":"0x1"}`, api.CodeInvalidArgument},
		{"unknown endpoint", "GET", "/v2/kv/a", "", api.CodeNotFound},
		{"wrong method", "POST", "/v1/kv/a", `{}`, api.CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			was := c.Nodes[0].Server.AppliedIndex()
			status, body := send(t, ctx, tt.method, base+tt.path, tt.body)
			if now := c.Nodes[0].Server.AppliedIndex(); now != was {
				t.Errorf("applied index moved from %d to %d", was, now)
			}
			var e api.ErrorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Fatalf("%s %s: status %d body %s; want code %s", tt.method, tt.path, status, body, tt.code)
			}
			if status != tt.code.Status() {
				t.Fatalf("status %d, want %d", status, tt.code.Status())
			}
		})
	}
	if after := c.Nodes[0].Server.AppliedIndex(); after != before {
		t.Fatalf("bad requests moved the applied index from %d to %d", before, after)
	}
}

func send(t *testing.T, ctx context.Context, method, url, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}
