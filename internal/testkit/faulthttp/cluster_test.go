package faulthttp

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestClusterHelpers drives a real member through its proxy and checks what
// the Cluster reads back: heartbeats, registrations, watches held, the
// applied index, sessions by handle and expiry.
func TestClusterHelpers(t *testing.T) {
	c := NewCluster(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := c.URLs()[0]

	session, err := testcluster.CreateSession(ctx, base, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testcluster.Heartbeat(ctx, base, session.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := testcluster.Heartbeat(ctx, base, session.SessionID, "0xdead"); err != nil {
		t.Fatal(err)
	}
	if got := c.Heartbeats(session.SessionID); got != 2 {
		t.Fatalf("Heartbeats = %d, want 2 (single and batched)", got)
	}

	stream, err := http.Get(base + "/v1/session/" + session.SessionID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	var watch api.Watch
	request := api.WatchRequest{Path: "/w", SessionID: session.SessionID, Persistent: true}
	if err := testcluster.Do(ctx, http.MethodPost, base, "/v1/watch", nil, request, &watch); err != nil {
		t.Fatal(err)
	}
	regs := c.Registrations()
	if len(regs) != 1 || regs[0].Member != "n1" || !reflect.DeepEqual(regs[0].Request, request) || regs[0].Reply.WatchID != watch.WatchID {
		t.Fatalf("Registrations = %+v, want the one made (%+v)", regs, watch)
	}
	if got := c.WatchCount(0); got != 1 {
		t.Fatalf("WatchCount = %d, want 1", got)
	}

	node, err := testcluster.Put(ctx, base, "/w", "v", "")
	if err != nil {
		t.Fatal(err)
	}
	if !testcluster.WaitFor(10*time.Second, func() bool { return c.Index() >= node.ModifiedIndex }) {
		t.Fatalf("Index = %d, below the write's %d", c.Index(), node.ModifiedIndex)
	}
	if id, ok := c.SessionByHandle(session.SessionHandle); !ok || id != session.SessionID {
		t.Fatalf("SessionByHandle = %q, %v; want %s", id, ok, session.SessionID)
	}
	c.Expire(session.SessionID)
	if _, err := testcluster.Heartbeat(ctx, base, session.SessionID); api.CodeOf(err) != api.CodeSessionExpired {
		t.Fatalf("heartbeat after Expire = %v, want session_expired", err)
	}
	if _, ok := c.SessionByHandle(session.SessionHandle); ok {
		t.Fatal("the expired session is still found by its handle")
	}
}
