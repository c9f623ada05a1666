package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
)

// TestWatchRefusedWithoutStreamReconnects: a server that refuses a
// registration because the session's stream is not attached there (it
// ended or replaced it just before) makes the session open its stream again
// and register there, rather than end the watcher with the refusal; every
// registration follows the stream it goes with.
func TestWatchRefusedWithoutStreamReconnects(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 2)
	// A member's watch history starts at the first change it applies; a
	// write first lets the re-registration's known_index be checked against
	// it, instead of firing a conservative resync of /a.
	env.put(t, "/history-start", "")
	first, err := env.session.Watch(context.Background(), "/a", Persistent())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		env.cluster.Proxy(i).RefuseWatches(2)
	}
	second, err := env.session.Watch(context.Background(), "/b", Persistent())
	if err != nil {
		t.Fatalf("Watch after refusals for want of a stream: %v, want it registered after a reconnect", err)
	}
	node := env.put(t, "/b", "1")
	if ev := receive(t, second); ev.Path != "/b" || ev.Index != node.ModifiedIndex {
		t.Fatalf("second watcher got %+v, want /b at %d", ev, node.ModifiedIndex)
	}
	node = env.put(t, "/a", "1")
	if ev := receive(t, first); ev.Path != "/a" || ev.Index != node.ModifiedIndex {
		t.Fatalf("first watcher got %+v after the reconnects, want /a at %d", ev, node.ModifiedIndex)
	}
	requireStreamBeforeRegistration(t, env)
}

// requireStreamBeforeRegistration checks, from the proxies' request
// logs, that every POST /v1/watch went to the server whose event stream the
// session had opened last.
func requireStreamBeforeRegistration(t *testing.T, env *watchEnv) {
	t.Helper()
	type request struct {
		server int
		faulthttp.Request
	}
	var all []request
	for i := range 2 {
		for _, r := range env.cluster.Proxy(i).Requests() {
			all = append(all, request{i, r})
		}
	}
	slices.SortStableFunc(all, func(a, b request) int { return a.Time.Compare(b.Time) })
	streamOn := -1
	for _, r := range all {
		switch {
		case r.Method == "GET" && strings.HasSuffix(r.Path, "/events"):
			streamOn = r.server
		case r.Method == "POST" && r.Path == "/v1/watch" && r.server != streamOn:
			t.Fatalf("a registration went to server %d while the stream was opened last on %d", r.server, streamOn)
		}
	}
}

// TestWatchRefusedWithoutStreamGivesUp: a registration refused for want of
// a stream however often the session opens it again (a proxy that sends the
// stream and the registrations to different members) ends the watcher with
// the server's message instead of retrying forever.
func TestWatchRefusedWithoutStreamGivesUp(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.cluster.Proxy(0).RefuseWatches(1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := env.session.Watch(ctx, "/a")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodePreconditionFailed || !strings.Contains(apiErr.Message, "no event stream open") {
		t.Fatalf("Watch refused every time: %v, want the server's precondition_failed", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Watch waited for its context instead of giving up")
	}
}
