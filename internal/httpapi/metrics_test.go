package httpapi_test

import (
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

// TestTooLargeBodyClosesConnection: a body over the limit is answered 413
// with "Connection: close" and the rest of the body is not read, as net/http
// does for http.MaxBytesReader, although the request metrics wrap the
// ResponseWriter (which hides the writer's hook that MaxBytesReader calls).
func TestTooLargeBodyClosesConnection(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := `{"value":"` + strings.Repeat("x", 200_000) + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.URL(0)+"/v1/kv/big", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(data, &e) != nil || e.Error.Code != api.CodeTooLarge {
		t.Fatalf("status %d %s, want 413 too_large", resp.StatusCode, data)
	}
	if !resp.Close {
		t.Fatalf("a 413 for a body over the limit keeps the connection open (header %v)", resp.Header)
	}
}
