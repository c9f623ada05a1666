package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/httpapi"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// serveWithProfiling serves c's first member's API as latchd does with
// --enable-pprof and returns its base URL.
func serveWithProfiling(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(withProfiling(httpapi.New(c.Nodes[0].Server, nil)), httpapi.Limits{}, nil)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// noRedirects is a client that shows a redirect instead of following it.
var noRedirects = &http.Client{Timeout: 20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func request(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data
}

// TestProfilingLeavesTheAPIAlone: with --enable-pprof, paths the API
// refuses (a node path with "..", "." or "//", an endpoint path that is not
// clean) get the API's own answers, never a redirect, and /debug/pprof/
// serves the profiles.
func TestProfilingLeavesTheAPIAlone(t *testing.T) {
	base := serveWithProfiling(t, testcluster.New(t, 1, testcluster.Options{}))
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{"PUT", "/v1/kv/a/../b", http.StatusBadRequest},
		{"GET", "/v1/kv/a/./b", http.StatusBadRequest},
		{"GET", "/v1/kv/a//b", http.StatusBadRequest},
		{"GET", "//v1/status", http.StatusNotFound},
		{"GET", "/v1/status/", http.StatusNotFound},
		{"GET", "/debug/pprof/../../v1/status", http.StatusNotFound},
		{"GET", "/debug/pprof", http.StatusNotFound},
	} {
		status, body := request(t, tt.method, base+tt.path, "", `{"value":"x"}`)
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || status != tt.status || e.Error.Code == "" {
			t.Errorf("%s %s: %d %s; want the API's %d in its envelope", tt.method, tt.path, status, body, tt.status)
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/symbol"} {
		if status, body := request(t, "GET", base+path, "", ""); status != http.StatusOK {
			t.Errorf("GET %s: %d %.200s; want 200", path, status, body)
		}
	}
	if status, body := request(t, "GET", base+"/v1/status", "", ""); status != http.StatusOK {
		t.Errorf("GET /v1/status: %d %s", status, body)
	}
}

// TestProfilesNeedAnAdmin: with auth enabled, /debug/pprof/ is an admin
// call: 401 in the API's envelope without a user, 403 for a user without
// admin on "/" (who still reads /metrics), the profiles for root.
func TestProfilesNeedAnAdmin(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Auth: server.AuthConfig{PasswordCost: bcrypt.MinCost}})
	base := serveWithProfiling(t, c)
	for _, change := range []string{
		`{"action":"user_add","user":"root","password":"root-pw"}`,
		`{"action":"user_add","user":"ops","password":"ops-pw"}`,
		`{"action":"enable"}`,
	} {
		if status, body := request(t, "POST", base+"/v1/auth", "", change); status != http.StatusOK {
			t.Fatalf("POST /v1/auth %s: %d %s", change, status, body)
		}
	}
	login := func(user, password string) string {
		t.Helper()
		status, body := request(t, "POST", base+"/v1/auth/login", "", `{"user":"`+user+`","password":"`+password+`"}`)
		var answer api.LoginResponse
		if err := json.Unmarshal(body, &answer); err != nil || status != http.StatusOK || answer.Token == "" {
			t.Fatalf("login %s: %d %s", user, status, body)
		}
		return answer.Token
	}
	ops, root := login("ops", "ops-pw"), login("root", "root-pw")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		for _, token := range []string{"", "latch_not-a-token"} {
			status, body := request(t, "GET", base+path, token, "")
			if status != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthenticated"`) {
				t.Errorf("GET %s with token %q: %d %.200s; want 401 unauthenticated", path, token, status, body)
			}
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap?debug=1"} {
		status, body := request(t, "GET", base+path, ops, "")
		if status != http.StatusForbidden || !strings.Contains(string(body), `"code":"permission_denied"`) {
			t.Errorf("GET %s as a user without admin: %d %.200s; want 403 permission_denied", path, status, body)
		}
	}
	if status, body := request(t, "GET", base+"/metrics", ops, ""); status != http.StatusOK {
		t.Errorf("GET /metrics as a user: %d %.200s; want 200", status, body)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/metrics"} {
		if status, body := request(t, "GET", base+path, root, ""); status != http.StatusOK {
			t.Errorf("GET %s as root: %d %.200s; want 200", path, status, body)
		}
	}
}
