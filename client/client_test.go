package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
)

func isCode(err error, code api.Code) bool { return errors.Is(err, &api.Error{Code: code}) }

func TestKVOperations(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()

	created, err := c.Put(ctx, "/config/a", "v1", PrevNone())
	if err != nil || created.Version != 1 {
		t.Fatalf("Put create = %+v, %v; want version 1", created, err)
	}
	tests := []struct {
		name string
		run  func() error
		code api.Code // "" means success
	}{
		{"create again with PrevNone", func() error { _, err := c.Put(ctx, "/config/a", "x", PrevNone()); return err }, api.CodePreconditionFailed},
		{"CAS on the wrong version", func() error { _, err := c.Put(ctx, "/config/a", "x", PrevVersion(7)); return err }, api.CodePreconditionFailed},
		{"CAS on the right version", func() error { _, err := c.Put(ctx, "/config/a", "v2", PrevVersion(1)); return err }, ""},
		{"unconditional put", func() error { _, err := c.Put(ctx, "/config/b", "b", PrevAny()); return err }, ""},
		{"get a missing node", func() error { _, err := c.Get(ctx, "/nope"); return err }, api.CodeNotFound},
		{"bad path", func() error { _, err := c.Get(ctx, "/a/"); return err }, api.CodeInvalidArgument},
		{"ephemeral without session", func() error { _, err := c.Put(ctx, "/e", "", Ephemeral()); return err }, api.CodeInvalidArgument},
		{"recursive on put", func() error { _, err := c.Put(ctx, "/e", "", Recursive()); return err }, api.CodeInvalidArgument},
		{"delete a parent without Recursive", func() error { _, err := c.Delete(ctx, "/config"); return err }, api.CodePreconditionFailed},
		{"delete with the wrong version", func() error { _, err := c.Delete(ctx, "/config/b", PrevVersion(9)); return err }, api.CodePreconditionFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if tt.code == "" && err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if tt.code != "" && !isCode(err, tt.code) {
				t.Fatalf("got %v, want code %s", err, tt.code)
			}
		})
	}

	node, err := c.Get(ctx, "/config/a")
	if err != nil || node.Value != "v2" || node.Version != 2 {
		t.Fatalf("Get = %+v, %v; want v2 at version 2", node, err)
	}
	children, err := c.Children(ctx, "/config", Stale())
	if err != nil || len(children.Children) != 2 || children.Children[0] != "a" || children.Children[1] != "b" {
		t.Fatalf("Children = %+v, %v; want [a b]", children, err)
	}
	if _, err := c.Delete(ctx, "/config", Recursive()); err != nil {
		t.Fatalf("recursive Delete: %v", err)
	}
	if _, err := c.Get(ctx, "/config/a"); !isCode(err, api.CodeNotFound) {
		t.Fatalf("Get after recursive delete = %v, want not_found", err)
	}
}

func TestFailoverOnConnectionError(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	cluster.Proxy(0).Stop()

	// A read and a session-less write both reach the second server: the
	// write is safe to resend because the connection was refused.
	if _, err := c.Get(ctx, "/k"); err != nil {
		t.Fatalf("Get after the first server stopped: %v", err)
	}
	if _, err := c.Put(ctx, "/k", "v2"); err != nil {
		t.Fatalf("Put after the first server stopped: %v", err)
	}
	if got := len(cluster.Proxy(1).Requests()); got != 2 {
		t.Fatalf("second server saw %d requests, want 2", got)
	}
	// The dead server is avoided: the next call goes straight to the live one.
	before := len(cluster.Proxy(1).Requests())
	if _, err := c.Get(ctx, "/k"); err != nil {
		t.Fatal(err)
	}
	if got := len(cluster.Proxy(1).Requests()); got != before+1 {
		t.Fatalf("second server saw %d new requests, want 1", got-before)
	}
}

func TestLeaderHintIsFollowed(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, []string{cluster.Proxy(0).URL()}, nil) // the second server is only learnt from the hint
	cluster.Proxy(0).FailNext(1, api.CodeUnavailable, cluster.Proxy(1).URL())

	if _, err := c.Get(context.Background(), "/"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got := len(cluster.Proxy(1).Requests()); got != 1 {
		t.Fatalf("hinted server saw %d requests, want 1", got)
	}
	if got := c.Endpoints(); len(got) != 2 || got[1] != cluster.Proxy(1).URL() {
		t.Fatalf("Endpoints = %v, want the hint added", got)
	}
	if _, err := c.Get(context.Background(), "/"); err != nil {
		t.Fatal(err)
	}
	if got := len(cluster.Proxy(1).Requests()); got != 2 {
		t.Fatalf("the client did not stay on the hinted server (%d requests)", got)
	}
}

func TestSessionlessWriteIsNotResentAfter503(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	cluster.Proxy(0).FailNext(1, api.CodeUnavailable, "")

	_, err := c.Put(context.Background(), "/seq/n-", "v", Sequential())
	if !isCode(err, api.CodeUnavailable) {
		t.Fatalf("Put = %v, want unavailable (outcome unknown)", err)
	}
	if got := len(cluster.Proxy(0).Requests()) + len(cluster.Proxy(1).Requests()); got != 1 {
		t.Fatalf("the write was sent %d times, want once", got)
	}
}

// TestConnectionDroppedMidRequest: a member acts on a write and the
// connection drops before the reply. A session-less write is not resent
// (its outcome is unknown); a session write is resent with its request_seq
// and applied once.
func TestConnectionDroppedMidRequest(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	cluster.Real.WaitLeader(10 * time.Second)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	drop := faulthttp.Fault{Method: "PUT", Times: 1, Kind: faulthttp.ForwardThenDrop}

	cluster.Proxy(0).Inject(drop)
	if _, err := c.Put(ctx, "/drop/plain-", "v", Sequential()); !isCode(err, api.CodeUnavailable) {
		t.Fatalf("session-less Put = %v, want unavailable (outcome unknown)", err)
	}
	if got := cluster.Proxy(0).Count("PUT", "/v1/kv/*") + cluster.Proxy(1).Count("PUT", "/v1/kv/*"); got != 1 {
		t.Fatalf("the session-less write was sent %d times, want once", got)
	}

	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	cluster.Proxy(0).Inject(drop)
	cluster.Proxy(1).Inject(drop)
	node, err := c.Put(ctx, "/drop/session-", "v", Sequential(), WithSession(s))
	if err != nil {
		t.Fatalf("session Put after dropped connections: %v", err)
	}
	// The session-less write's outcome is unknown (the member may have
	// answered 503 past its request deadline on a loaded machine): at most
	// one plain node. The session write was applied exactly once.
	children, err := c.Children(ctx, "/drop")
	if err != nil {
		t.Fatal(err)
	}
	var plain, session []string
	for _, child := range children.Children {
		if strings.HasPrefix(child, "session-") {
			session = append(session, "/drop/"+child)
		} else {
			plain = append(plain, child)
		}
	}
	if len(plain) > 1 || len(session) != 1 || session[0] != node.Path {
		t.Fatalf("Children = %+v; want at most one plain node and exactly %s", children, node.Path)
	}
}

func TestOverloadedIsRetried(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	cluster.Proxy(0).FailNext(2, api.CodeOverloaded, "")
	if _, err := c.Put(context.Background(), "/k", "v"); err != nil {
		t.Fatalf("Put after two 429s: %v", err)
	}
	if got := len(cluster.Proxy(0).Requests()); got != 3 {
		t.Fatalf("server saw %d requests, want 3", got)
	}
}

func TestSessionWriteRetryReusesRequestSeq(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	// The first write is applied but its reply lost; then the next attempt
	// is refused with a hint. The third attempt must carry the same seq and
	// get the first result back.
	cluster.Proxy(0).LoseNextReplies(1)
	cluster.Proxy(1).FailNext(1, api.CodeUnavailable, cluster.Proxy(0).URL())
	node, err := c.Put(ctx, "/queue/r/item-", "", Sequential(), Ephemeral(), WithSession(s))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	var seqs []string
	for i := 0; i < 2; i++ {
		for _, r := range cluster.Proxy(i).Requests() {
			if r.Method == "PUT" {
				seqs = append(seqs, r.Query.Get("request_seq"))
				if r.Query.Get("session_id") != s.ID() {
					t.Errorf("write carried session_id %q, want %q", r.Query.Get("session_id"), s.ID())
				}
			}
		}
	}
	if len(seqs) != 3 || seqs[0] != seqs[1] || seqs[1] != seqs[2] || seqs[0] == "" {
		t.Fatalf("request_seq per attempt = %v, want three equal non-empty values", seqs)
	}
	children, err := c.Children(ctx, "/queue/r")
	if err != nil || len(children.Children) != 1 || "/queue/r/"+children.Children[0] != node.Path {
		t.Fatalf("Children = %+v, %v; want exactly %s", children, err, node.Path)
	}

	// The next write gets a fresh, higher seq.
	if _, err := c.Put(ctx, "/queue/r/other", "", WithSession(s)); err != nil {
		t.Fatal(err)
	}
	last := cluster.Proxy(0).Requests()
	next, _ := strconv.ParseUint(last[len(last)-1].Query.Get("request_seq"), 10, 64)
	first, _ := strconv.ParseUint(seqs[0], 10, 64)
	if next <= first {
		t.Fatalf("next request_seq %d is not above %d", next, first)
	}
}

func TestStaleReadsSendMonotonicMinIndex(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	var last *api.Node
	for i := 0; i < 5; i++ {
		node, err := c.Put(ctx, "/k", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		last = node
	}
	// The members' log holds more than the five writes (the leader's first
	// entry, each member announcing its client URL, in the background), so
	// the index to expect is the last write's, and a read may show a later
	// one.
	want := last.ModifiedIndex
	if c.LastIndex() != want || cluster.Index() < want {
		t.Fatalf("LastIndex = %d, cluster applied %d, want the last write's %d", c.LastIndex(), cluster.Index(), want)
	}
	if _, err := c.Get(ctx, "/k", Stale()); err != nil {
		t.Fatal(err)
	}
	seen := c.LastIndex() // the stale read's index, at least want
	cluster.Proxy(0).Stop()
	if _, err := c.Get(ctx, "/k", Stale()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/k"); err != nil {
		t.Fatal(err)
	}

	var sent []uint64
	for i := 0; i < 2; i++ {
		for _, r := range cluster.Proxy(i).Requests() {
			if r.Method == "GET" && r.Query.Get("consistency") == "stale" {
				n, err := strconv.ParseUint(r.Query.Get("min_index"), 10, 64)
				if err != nil {
					t.Fatalf("stale read without min_index: %v", r.Query)
				}
				sent = append(sent, n)
			}
		}
	}
	if len(sent) != 2 || sent[0] != want || sent[1] != seen || seen < want {
		t.Fatalf("min_index sent = %v, want [%d %d] (the last write's, then the first read's)", sent, want, seen)
	}
	if got := cluster.Proxy(1).Requests()[0].Query.Get("min_index"); got != strconv.FormatUint(seen, 10) {
		t.Fatalf("after failover min_index = %q, want %d", got, seen)
	}
}

func TestContextIsHonoured(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	cluster.Proxy(0).SetHang(true)
	defer cluster.Proxy(0).SetHang(false)

	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				waitFor(t, "the request to arrive", func() bool { return len(cluster.Proxy(0).Requests()) > 0 })
				cancel()
			}()
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Get(ctx, "/k")
			if !errors.Is(err, tt.want) {
				t.Fatalf("Get = %v, want %v", err, tt.want)
			}
			if elapsed := time.Since(start); elapsed > 4*time.Second {
				t.Fatalf("Get returned after %v, not at the context's end", elapsed)
			}
		})
	}
}

func TestGivesUpWhenNoServerAnswers(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	cluster.Close()
	_, err := c.Get(context.Background(), "/k")
	if !isCode(err, api.CodeUnavailable) {
		t.Fatalf("Get = %v, want unavailable", err)
	}
}

func TestPinnedStatusDoesNotFailOver(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	status, err := c.StatusOf(context.Background(), cluster.Proxy(1).URL())
	if err != nil || status.Name != "n2" {
		t.Fatalf("StatusOf(n2) = %+v, %v", status, err)
	}
	cluster.Proxy(1).Stop()
	if _, err := c.StatusOf(context.Background(), cluster.Proxy(1).URL()); !isCode(err, api.CodeUnavailable) {
		t.Fatalf("StatusOf a stopped server = %v, want unavailable", err)
	}
	if got := len(cluster.Proxy(0).Requests()); got != 0 {
		t.Fatalf("a pinned call reached another server %d times", got)
	}
}
