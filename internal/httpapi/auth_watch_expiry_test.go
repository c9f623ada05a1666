package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestTokenExpiryEndsItsWatch: in virtual time, with tokens valid 2 s, a
// reader's recursive watch registered with its token delivers the writes
// made before the token expires; at the expiry the session's stream ends
// with the reason "unauthenticated: token expired...", the event fired just
// before and never read is not sent, and no later write reaches the watch.
// The same user's watch registered by certificate name (no token) keeps
// receiving. Logged in again, the reader re-registers with known_index and
// misses nothing.
func TestTokenExpiryEndsItsWatch(t *testing.T) {
	const ttl = 2 * time.Second
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := testcluster.New(t, 1, testcluster.Options{Time: fake, Auth: server.AuthConfig{TokenTTL: ttl}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	f := setUpAuth(t, ctx, c.URL(0))
	srv := c.Nodes[0].Server
	// Root and the certificate's reader prove their users without a token.
	rootCtx := server.WithCredentials(ctx, server.Credentials{User: "root"})
	certCtx := server.WithCredentials(ctx, server.Credentials{CertName: "reader"})
	put := func(path string) uint64 {
		t.Helper()
		n, err := srv.Put(rootCtx, server.PutRequest{Path: path, Value: []byte("v")})
		if err != nil {
			t.Fatalf("put %s: %v", path, err)
		}
		return n.ModifiedIndex
	}

	session, stream := sessionWithStream(t, ctx, srv, f.reader)
	watch := watchAs(t, ctx, srv, f.reader, session, "/app")
	certSession, certStream := certSessionWithStream(t, certCtx, srv)
	certWatch := certWatchOn(t, certCtx, srv, certSession, "/app")

	before := put("/app/before")
	collectUntil(t, stream, watch, "/app/before")
	collectUntil(t, certStream, certWatch, "/app/before")
	put("/app/unread") // fired before the expiry; nobody reads it from stream

	c.Advance(ttl)
	reason := waitStreamEnd(t, stream, 20*time.Second)
	if !strings.HasPrefix(reason, "unauthenticated: token expired") {
		t.Fatalf("the token's stream ended with %q, want unauthenticated: token expired", reason)
	}
	if n, ended := stream.Take(make([]server.Delivery, 8)); n != 0 || !ended {
		t.Errorf("the expired watch's stream handed over %d events after the expiry (ended: %v)", n, ended)
	}
	put("/app/after")
	got := collectUntil(t, certStream, certWatch, "/app/after")
	if !hasPath(got[certWatch], "/app/unread") {
		t.Errorf("the certificate's watch got %+v, want /app/unread and /app/after", got[certWatch])
	}
	if _, err := srv.Watch(server.WithCredentials(ctx, server.Credentials{Token: f.reader}), session,
		server.WatchRequest{Path: "/app", Recursive: true}); !errors.Is(err, &api.Error{Code: api.CodeUnauthenticated}) {
		t.Errorf("a watch with the expired token: %v, want unauthenticated", err)
	}

	// Logged in again: a new stream, the watch again from the last index
	// seen, and nothing of the expired watch.
	fresh := login(t, ctx, f.base, "reader", "reader-pw")
	freshCtx := server.WithCredentials(ctx, server.Credentials{Token: fresh})
	again, _, err := srv.Events(freshCtx, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	w, err := srv.Watch(freshCtx, session, server.WatchRequest{Path: "/app", Recursive: true, Persistent: true, KnownIndex: before})
	if err != nil {
		t.Fatal(err)
	}
	put("/app/sentinel")
	got = collectUntil(t, again, w.WatchID, "/app/sentinel")
	if len(got[watch]) > 0 {
		t.Errorf("the expired watch's events reached the next stream: %+v", got[watch])
	}
	// The changes since before fire one catch-up event at the registration.
	if events := got[w.WatchID]; events[0].Index != w.Index || hasPath(events, "/app/unread") || hasPath(events, "/app/after") {
		t.Errorf("the re-registered watch got %+v, want a catch-up at its registration index %d, then /app/sentinel", events, w.Index)
	}
}

func hasPath(events []api.Event, path string) bool {
	for _, ev := range events {
		if ev.Path == path {
			return true
		}
	}
	return false
}

// certSessionWithStream creates a session with ctx's credentials (a
// certificate's user) and attaches its event stream.
func certSessionWithStream(t *testing.T, ctx context.Context, srv *server.Server) (uint64, server.EventStream) {
	t.Helper()
	sess, err := srv.CreateSession(ctx, 60000)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := api.ParseID(sess.SessionID)
	stream, _, err := srv.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stream.Close)
	return id, stream
}

// certWatchOn registers a persistent recursive watch on path with ctx's
// credentials.
func certWatchOn(t *testing.T, ctx context.Context, srv *server.Server, session uint64, path string) string {
	t.Helper()
	w, err := srv.Watch(ctx, session, server.WatchRequest{Path: path, Recursive: true, Persistent: true})
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	return w.WatchID
}

// waitStreamEnd waits, up to timeout of real time, for stream to end
// without reading its events, and returns its reason.
func waitStreamEnd(t *testing.T, stream server.EventStream, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for stream.Reason() == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the stream is still open %v after the token's expiry", timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling for the outcome, bounded by the deadline
	}
	return stream.Reason()
}
