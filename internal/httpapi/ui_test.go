package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestDashboardRoute: the client port serves the dashboard at /ui and
// /ui/, its files under /ui/, and answers anything else there in the API's
// JSON error envelope.
func TestDashboardRoute(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, path := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/style.css"} {
		if status, body := send(t, ctx, "GET", base+path, ""); status != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: status %d, %d bytes; want 200 with the file", path, status, len(body))
		}
	}
	for _, path := range []string{"/ui/nothing.js", "/ui//app.js", "/ui/app.js/"} {
		status, body := send(t, ctx, "GET", base+path, "")
		if status != http.StatusNotFound || !strings.Contains(string(body), `"code":"not_found"`) {
			t.Errorf("GET %s: status %d body %s; want the 404 envelope", path, status, body)
		}
	}
	if status, body := send(t, ctx, "POST", base+"/ui", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui: status %d body %s; want 405", status, body)
	}
}

// TestDashboardFilesNeedNoLogin: with auth enabled the dashboard's files
// are served without credentials (they hold no data: the page shows its
// login form), while every endpoint the page reads its data from is 401.
func TestDashboardFilesNeedNoLogin(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := setUpAuth(t, ctx, c.URL(0))
	for _, path := range []string{"/ui", "/ui/app.js", "/ui/style.css"} {
		if status, body := sendAs(t, ctx, "", "GET", f.base+path, ""); status != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s without credentials: %d, %d bytes; want 200 with the file", path, status, len(body))
		}
	}
	for _, path := range []string{"/v1/cluster/health", "/v1/status", "/metrics", "/v1/locks", "/v1/kv/app/x"} {
		if status, body := sendAs(t, ctx, "", "GET", f.base+path, ""); status != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d %s; want 401", path, status, body)
		}
	}
}
