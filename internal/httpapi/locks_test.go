package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestLockNotHeldBody: an acquire that gives up after wait_ms is a reply
// with held false from the server, and the wire answers it with docs/api.md's
// 409 whose body is, byte for byte, the error envelope followed by held,
// session_handle, position, path and index, in that order.
func TestLockNotHeldBody(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, second := openSession(t, ctx, base), openSession(t, ctx, base)
	status, body := send(t, ctx, "POST", base+"/v1/lock/acquire", `{"name":"db","session_id":"`+first.SessionID+`"}`)
	var held api.Lock
	if err := json.Unmarshal(body, &held); status != http.StatusOK || err != nil || !held.Held {
		t.Fatalf("first acquire: status %d body %s; want 200 held", status, body)
	}

	status, body = send(t, ctx, "POST", base+"/v1/lock/acquire", `{"name":"db","session_id":"`+second.SessionID+`","wait_ms":0}`)
	if status != http.StatusConflict {
		t.Fatalf("second acquire: status %d body %s; want 409", status, body)
	}
	var got api.Lock
	if err := json.Unmarshal(body, &got); err != nil || got.Path == "" || got.Index == 0 {
		t.Fatalf("second acquire body %s (%v): want the queue node and an index", body, err)
	}
	want := fmt.Sprintf(`{"error":{"code":"lock_not_held","message":"lock db not acquired within wait_ms"},`+
		`"held":false,"session_handle":%q,"position":1,"path":%q,"index":%d}`+"\n",
		second.SessionHandle, got.Path, got.Index)
	if string(body) != want {
		t.Fatalf("409 body\n got %s\nwant %s", body, want)
	}
}

func openSession(t *testing.T, ctx context.Context, base string) api.Session {
	t.Helper()
	status, body := send(t, ctx, "POST", base+"/v1/session/create", `{"timeout_ms":10000}`)
	var s api.Session
	if err := json.Unmarshal(body, &s); status != http.StatusOK || err != nil || s.SessionID == "" {
		t.Fatalf("create session: status %d body %s", status, body)
	}
	return s
}
