package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestNodeTimesInReads: GET shows created_at_ms and modified_at_ms within
// the test's clock window (a write moves only the second) and cversion
// counting the creates and deletes of children; a PUT's reply keeps its
// documented fields only.
func TestNodeTimesInReads(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := c.URL(0) + "/v1/kv"
	type node struct {
		CreatedAtMs  *int64 `json:"created_at_ms"`
		ModifiedAtMs *int64 `json:"modified_at_ms"`
		Cversion     *int64 `json:"cversion"`
	}
	get := func(path string) node {
		status, body := send(t, ctx, "GET", base+path, "")
		var n node
		if status != http.StatusOK || json.Unmarshal(body, &n) != nil || n.CreatedAtMs == nil || n.ModifiedAtMs == nil {
			t.Fatalf("GET %s: %d %s; want created_at_ms and modified_at_ms", path, status, body)
		}
		return n
	}
	before := time.Now().UnixMilli()
	if status, body := send(t, ctx, "PUT", base+"/t", `{"value":"a"}`); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	} else if written := string(body); json.Unmarshal(body, &node{}) != nil || strings.Contains(written, "created_at_ms") {
		t.Errorf("a PUT reply grew the times: %s", written)
	}
	created := get("/t")
	if *created.CreatedAtMs < before || *created.ModifiedAtMs != *created.CreatedAtMs || created.Cversion != nil {
		t.Errorf("new node: %+v; want both times from %d on and equal, no cversion", created, before)
	}
	send(t, ctx, "PUT", base+"/t/c1", `{"value":""}`)
	send(t, ctx, "PUT", base+"/t/c2", `{"value":""}`)
	send(t, ctx, "DELETE", base+"/t/c1", "")
	send(t, ctx, "PUT", base+"/t", `{"value":"b"}`)
	after := time.Now().UnixMilli()
	n := get("/t")
	switch {
	case *n.CreatedAtMs != *created.CreatedAtMs:
		t.Errorf("a write moved created_at_ms from %d to %d", *created.CreatedAtMs, *n.CreatedAtMs)
	case *n.ModifiedAtMs < *n.CreatedAtMs || *n.ModifiedAtMs > after:
		t.Errorf("modified_at_ms %d outside [%d, %d]", *n.ModifiedAtMs, *n.CreatedAtMs, after)
	case n.Cversion == nil || *n.Cversion != 3:
		t.Errorf("cversion %v after two creates and a delete of children, want 3", n.Cversion)
	}
}
