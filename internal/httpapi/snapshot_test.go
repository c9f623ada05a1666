package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestSnapshotStreamsABackupFile: GET /v1/snapshot answers a whole backup
// file (header magic first, trailer magic last) at the index of every write
// acknowledged before it; bad parameters and other methods get the error
// envelope and change nothing.
func TestSnapshotStreamsABackupFile(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitClientAddress(t, c)
	written, err := testcluster.Put(ctx, base, "/backed/up", "v", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	index, _ := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		!bytes.HasPrefix(body, []byte("LATCHBAK")) || !bytes.HasSuffix(body, []byte("LATCHEND")) {
		t.Fatalf("GET /v1/snapshot: %d %q, %d bytes; want 200 with a whole backup file", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	if index < written.ModifiedIndex || !bytes.Contains(body, []byte("backed")) {
		t.Fatalf("snapshot at index %d, want at or above the write at %d, holding it", index, written.ModifiedIndex)
	}
	before := c.Nodes[0].Server.AppliedIndex()
	for _, tt := range []struct {
		method, query string
		status        int
		code          api.Code
	}{
		{"GET", "?consistency=fresh", http.StatusBadRequest, api.CodeInvalidArgument},
		{"GET", "?shard=2", http.StatusBadRequest, api.CodeInvalidArgument},
		{"POST", "", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed},
	} {
		req, _ := http.NewRequest(tt.method, base+"/v1/snapshot"+tt.query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var envelope api.ErrorBody
		decodeErr := json.NewDecoder(resp.Body).Decode(&envelope)
		resp.Body.Close()
		if resp.StatusCode != tt.status || decodeErr != nil || envelope.Error.Code != tt.code {
			t.Errorf("%s /v1/snapshot%s: %d %+v (%v), want %d %s", tt.method, tt.query, resp.StatusCode, envelope, decodeErr, tt.status, tt.code)
		}
	}
	if after := c.Nodes[0].Server.AppliedIndex(); after != before {
		t.Errorf("refused snapshot requests moved the applied index from %d to %d", before, after)
	}
}
