package httpapi_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

var watchSeed = flag.Int64("seed", 0, "seed of the randomized auth watch test (0: from the clock)")

// sessionWithStream creates a session as token's user on srv and attaches
// its event stream (closed at the test's end).
func sessionWithStream(t *testing.T, ctx context.Context, srv *server.Server, token string) (uint64, server.EventStream) {
	t.Helper()
	creds := server.WithCredentials(ctx, server.Credentials{Token: token})
	sess, err := srv.CreateSession(creds, 60000)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := api.ParseID(sess.SessionID)
	stream, _, err := srv.Events(creds, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stream.Close)
	return id, stream
}

// watchAs registers a persistent recursive watch on path for session with
// token's credentials and returns its id.
func watchAs(t *testing.T, ctx context.Context, srv *server.Server, token string, session uint64, path string) string {
	t.Helper()
	w, err := srv.Watch(server.WithCredentials(ctx, server.Credentials{Token: token}), session,
		server.WatchRequest{Path: path, Recursive: true, Persistent: true})
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	return w.WatchID
}

// collectUntil reads stream until an event of watch on path arrives, and
// returns every event read by watch id.
// It takes one event at a time, so it leaves the events after that one
// queued.
func collectUntil(t *testing.T, stream server.EventStream, watch, path string) map[string][]api.Event {
	t.Helper()
	got := map[string][]api.Event{}
	deadline := time.After(30 * time.Second)
	into := make([]server.Delivery, 1)
	for {
		n, ended := stream.Take(into)
		if ended {
			t.Fatalf("the event stream ended: %s", stream.Reason())
		}
		if n == 0 {
			select {
			case <-stream.Ready():
			case <-stream.Done():
			case <-deadline:
				t.Fatalf("no event of watch %s on %s within 30s; got %v", watch, path, got)
			}
			continue
		}
		ev := into[0].Event()
		got[ev.WatchID] = append(got[ev.WatchID], ev)
		if ev.WatchID == watch && ev.Path == path {
			return got
		}
	}
}

// TestRevokedGrantStopsWatchAtItsIndex: a reader's running recursive
// watch on /app delivers every change made before the revocation of its
// read grant on /app and none after, cut at the revocation's log index
// even when writes and the revocation share batches of applied entries;
// the grant given back, it delivers again. Then a watch registered with a
// token stops at that token's logout, while the same user's watch under
// another token goes on.
// readerWatch is a one-member cluster with auth set up (setUpAuth) and the
// reader's session, its stream and its recursive watch on /app.
type readerWatch struct {
	ctx     context.Context
	f       authFixture
	srv     *server.Server
	rootCtx context.Context // with the root's credentials
	session uint64
	stream  server.EventStream
	watch   string
}

func newReaderWatch(t *testing.T, opts testcluster.Options) readerWatch {
	t.Helper()
	c := testcluster.New(t, 1, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	w := readerWatch{ctx: ctx, f: setUpAuth(t, ctx, c.URL(0)), srv: c.Nodes[0].Server}
	w.rootCtx = server.WithCredentials(ctx, server.Credentials{Token: w.f.root})
	w.session, w.stream = sessionWithStream(t, ctx, w.srv, w.f.reader)
	w.watch = watchAs(t, ctx, w.srv, w.f.reader, w.session, "/app")
	return w
}

func TestRevokedGrantStopsWatchAtItsIndex(t *testing.T) {
	seed := *watchSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (-seed to repeat)", seed)
	rng := rand.New(rand.NewSource(seed))
	w := newReaderWatch(t, testcluster.Options{})
	ctx, f, srv, rootCtx, session, stream, watch := w.ctx, w.f, w.srv, w.rootCtx, w.session, w.stream, w.watch

	// Writers race the revocation, so that it lands amid their entries.
	const writers, puts = 4, 40
	revokeAfter := rng.Intn(writers * puts / 2)
	var mu sync.Mutex
	written := map[string]uint64{} // path -> index
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range puts {
				path := fmt.Sprintf("/app/p-%d-%d", w, i)
				n, err := srv.Put(rootCtx, server.PutRequest{Path: path, Value: []byte("v")})
				if err != nil {
					t.Errorf("put %s: %v", path, err)
					return
				}
				mu.Lock()
				written[path] = n.ModifiedIndex
				mu.Unlock()
			}
		}()
	}
	for {
		mu.Lock()
		n := len(written)
		mu.Unlock()
		if n >= revokeAfter {
			break
		}
		time.Sleep(time.Millisecond) // polling the writers' progress, not waiting for an outcome
	}
	revoked, err := srv.ChangeAuth(rootCtx, api.AuthChange{Action: "role_revoke", Role: "r", Perm: "read", Prefix: "/app"})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Give the grant back and write a sentinel the watch must deliver.
	if _, err := srv.ChangeAuth(rootCtx, api.AuthChange{Action: "role_grant", Role: "r", Perm: "read", Prefix: "/app"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Put(rootCtx, server.PutRequest{Path: "/app/sentinel", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	got := collectUntil(t, stream, watch, "/app/sentinel")
	delivered := map[string]bool{}
	for _, ev := range got[watch] {
		delivered[ev.Path] = true
		if ev.Index > revoked && ev.Path != "/app/sentinel" {
			t.Errorf("event %s at index %d after the revocation at %d", ev.Path, ev.Index, revoked)
		}
	}
	before := 0
	for path, index := range written {
		if index < revoked {
			before++
			if !delivered[path] {
				t.Errorf("%s written at index %d before the revocation at %d was not delivered", path, index, revoked)
			}
		}
	}
	t.Logf("revocation at index %d: %d writes before it delivered, %d after it withheld", revoked, before, len(written)-before)

	// A second token of the reader, a second watch; the first token's
	// logout stops the first watch only.
	second := login(t, ctx, f.base, "reader", "reader-pw")
	watch2 := watchAs(t, ctx, srv, second, session, "/app")
	mustOK(t, ctx, f.reader, "POST", f.base+"/v1/auth/logout", "")
	if _, err := srv.Put(rootCtx, server.PutRequest{Path: "/app/after-logout", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	got = collectUntil(t, stream, watch2, "/app/after-logout")
	for _, ev := range got[watch] {
		if ev.Path == "/app/after-logout" {
			t.Errorf("the logged-out token's watch delivered %s", ev.Path)
		}
	}
}

// TestRevokedGrantStopsWatchAcrossShards: with 4 shards, a recursive watch
// over /app gets records in every shard; after a revocation applied on the
// member, no event of any shard under /app reaches it (the events of shards
// other than the meta group's are checked against the member's latest auth
// state), and once the grant is back they flow again.
func TestRevokedGrantStopsWatchAcrossShards(t *testing.T) {
	w := newReaderWatch(t, testcluster.Options{Shards: 4})
	srv, rootCtx, stream, watch := w.srv, w.rootCtx, w.stream, w.watch
	// Paths at several depths, so their events come from several shards.
	paths := []string{"/app/a", "/app/b/c", "/app/d/e/f", "/app/g/h"}
	put := func(suffix string) {
		for _, p := range paths {
			if _, err := srv.Put(rootCtx, server.PutRequest{Path: p + suffix, Value: []byte("v")}); err != nil {
				t.Fatalf("put %s: %v", p+suffix, err)
			}
		}
	}
	put("/before")
	if _, err := srv.ChangeAuth(rootCtx, api.AuthChange{Action: "role_revoke", Role: "r", Perm: "read", Prefix: "/app"}); err != nil {
		t.Fatal(err)
	}
	put("/hidden")
	if _, err := srv.ChangeAuth(rootCtx, api.AuthChange{Action: "role_grant", Role: "r", Perm: "read", Prefix: "/app"}); err != nil {
		t.Fatal(err)
	}
	put("/after")
	if _, err := srv.Put(rootCtx, server.PutRequest{Path: "/app/sentinel", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	delivered := map[string]bool{}
	for _, ev := range collectUntil(t, stream, watch, "/app/sentinel")[watch] {
		delivered[ev.Path] = true
	}
	for _, p := range paths {
		if !delivered[p+"/before"] || !delivered[p+"/after"] {
			t.Errorf("%s: before delivered %v, after delivered %v; want both", p, delivered[p+"/before"], delivered[p+"/after"])
		}
		if delivered[p+"/hidden"] {
			t.Errorf("%s/hidden, written while the grant was revoked, was delivered", p)
		}
	}
}
