package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// getJSON GETs url and decodes a 200 reply into a T.
func getJSON[T any](t *testing.T, ctx context.Context, url string) (T, []byte) {
	t.Helper()
	var out T
	status, body := send(t, ctx, "GET", url, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d body %s", url, status, body)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
	return out, body
}

// acquire takes lock name for session (waiting at most wait_ms 0) and
// returns the reply; held or queued, never an error.
func acquire(t *testing.T, ctx context.Context, base, name string, s api.Session) api.Lock {
	t.Helper()
	status, body := send(t, ctx, "POST", base+"/v1/lock/acquire", `{"name":"`+name+`","session_id":"`+s.SessionID+`"}`)
	var l api.Lock
	if err := json.Unmarshal(body, &l); err != nil || (status != http.StatusOK && status != http.StatusConflict) {
		t.Fatalf("acquire %s: status %d body %s", name, status, body)
	}
	return l
}

// TestListLocks: GET /v1/locks lists every lock with its holder's handle
// (never its id), token and waiters, as GET /v1/lock/{name} does, sorted by
// name, a page at a time with truncated and next_after.
func TestListLocks(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	empty, body := getJSON[api.LockList](t, ctx, base+"/v1/locks")
	if len(empty.Locks) != 0 || empty.Truncated || !strings.Contains(string(body), `"locks":[]`) {
		t.Fatalf("no lock yet: %s; want an empty list, not truncated", body)
	}

	first, second := openSession(t, ctx, base), openSession(t, ctx, base)
	tokens := map[string]uint64{}
	for _, name := range []string{"c", "a", "b"} {
		tokens[name] = acquire(t, ctx, base, name, first).FencingToken
	}
	if l := acquire(t, ctx, base, "a", second); l.Held {
		t.Fatalf("second session holds a: %+v", l)
	}

	all, body := getJSON[api.LockList](t, ctx, base+"/v1/locks")
	if strings.Contains(string(body), first.SessionID) || strings.Contains(string(body), second.SessionID) {
		t.Fatalf("the listing shows a session id, a bearer secret: %s", body)
	}
	if all.Truncated || len(all.Locks) != 3 {
		t.Fatalf("listing %s: want 3 locks, not truncated", body)
	}
	for i, name := range []string{"a", "b", "c"} {
		l := all.Locks[i]
		wantWaiters := 0
		if name == "a" {
			wantWaiters = 1
		}
		if l.Name != name || l.Holder == nil || l.Holder.SessionHandle != first.SessionHandle ||
			l.Holder.FencingToken != tokens[name] || l.Waiters != wantWaiters {
			t.Fatalf("lock %d = %+v (holder %+v); want %s held by %s with token %d, %d waiting",
				i, l, l.Holder, name, first.SessionHandle, tokens[name], wantWaiters)
		}
		one, _ := getJSON[api.LockState](t, ctx, base+"/v1/lock/"+name)
		if *one.Holder != *l.Holder || one.Waiters != l.Waiters {
			t.Fatalf("listing says %+v, GET /v1/lock/%s says %+v", l, name, one)
		}
	}

	page, _ := getJSON[api.LockList](t, ctx, base+"/v1/locks?limit=2")
	if !page.Truncated || page.NextAfter != "b" || len(page.Locks) != 2 || page.Locks[1].Name != "b" {
		t.Fatalf("first page of 2: %+v; want a, b, truncated, next_after b", page)
	}
	rest, body := getJSON[api.LockList](t, ctx, base+"/v1/locks?limit=2&after=b")
	if rest.Truncated || rest.NextAfter != "" || len(rest.Locks) != 1 || rest.Locks[0].Name != "c" ||
		strings.Contains(string(body), "next_after") {
		t.Fatalf("second page: %s; want c alone, not truncated, no next_after", body)
	}

	closeSession(t, ctx, base, first)
	after, _ := getJSON[api.LockList](t, ctx, base+"/v1/locks")
	if len(after.Locks) != 3 || after.Locks[0].Holder == nil || after.Locks[0].Holder.SessionHandle != second.SessionHandle ||
		after.Locks[1].Holder != nil || after.Locks[2].Holder != nil {
		t.Fatalf("after the holder's session closed: %+v; want a held by the waiter, b and c free", after)
	}
}

// TestListElections: GET /v1/elections lists every role with its leader's
// handle, value and token, and how many candidates, as GET
// /v1/election/{role} does.
func TestListElections(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, second := openSession(t, ctx, base), openSession(t, ctx, base)
	for _, join := range []struct {
		role  string
		s     api.Session
		value string
	}{{"web", first, "10.0.0.1"}, {"web", second, "10.0.0.2"}, {"db", second, "10.0.0.3"}} {
		status, body := send(t, ctx, "POST", base+"/v1/election/join",
			`{"role":"`+join.role+`","session_id":"`+join.s.SessionID+`","value":"`+join.value+`"}`)
		if status != http.StatusOK {
			t.Fatalf("join %s: status %d body %s", join.role, status, body)
		}
	}
	list, body := getJSON[api.ElectionList](t, ctx, base+"/v1/elections")
	if strings.Contains(string(body), first.SessionID) || strings.Contains(string(body), second.SessionID) {
		t.Fatalf("the listing shows a session id, a bearer secret: %s", body)
	}
	if list.Truncated || len(list.Elections) != 2 {
		t.Fatalf("listing %s: want 2 elections", body)
	}
	db, web := list.Elections[0], list.Elections[1]
	if db.Role != "db" || db.Candidates != 1 || db.Leader == nil || db.Leader.Value != "10.0.0.3" || db.Leader.SessionHandle != second.SessionHandle {
		t.Fatalf("db = %+v; want led by the second session with 10.0.0.3, 1 candidate", db)
	}
	if web.Role != "web" || web.Candidates != 2 || web.Leader == nil || web.Leader.Value != "10.0.0.1" || web.Leader.SessionHandle != first.SessionHandle {
		t.Fatalf("web = %+v; want led by the first session with 10.0.0.1, 2 candidates", web)
	}
	one, _ := getJSON[api.ElectionState](t, ctx, base+"/v1/election/web")
	if *one.Leader != *web.Leader {
		t.Fatalf("listing says %+v, GET /v1/election/web says %+v", web.Leader, one.Leader)
	}
	page, _ := getJSON[api.ElectionList](t, ctx, base+"/v1/elections?limit=1")
	if !page.Truncated || page.NextAfter != "db" || len(page.Elections) != 1 {
		t.Fatalf("page of 1: %+v; want db, truncated, next_after db", page)
	}
}

// TestListSessions: GET /v1/sessions counts and lists the live sessions by
// handle, never by id; only the leader, which decides expiry, tells how
// long each has left, and counts a session with under half its timeout
// left as expiring soon.
func TestListSessions(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Others(leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kept, err := testcluster.CreateSession(ctx, c.URL(leader), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	left, err := testcluster.CreateSession(ctx, c.URL(leader), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	onFollower, body := getJSON[api.SessionList](t, ctx, c.URL(follower)+"/v1/sessions?consistency=stale&min_index="+strconv.FormatUint(left.Index, 10))
	if onFollower.Count != 2 || onFollower.ExpiryKnown || len(onFollower.Sessions) != 2 || strings.Contains(string(body), "expires_in_ms") {
		t.Fatalf("a follower's listing: %s; want 2 sessions, no expiry known", body)
	}
	if strings.Contains(string(body), kept.SessionID) || strings.Contains(string(body), left.SessionID) {
		t.Fatalf("the listing shows a session id, a bearer secret: %s", body)
	}
	handles := []string{onFollower.Sessions[0].SessionHandle, onFollower.Sessions[1].SessionHandle}
	if handles[0] >= handles[1] || !containsAll(handles, kept.SessionHandle, left.SessionHandle) {
		t.Fatalf("handles %v: want both sessions' handles, sorted", handles)
	}
	page, _ := getJSON[api.SessionList](t, ctx, c.URL(follower)+"/v1/sessions?limit=1&after="+handles[0])
	if page.Count != 2 || page.Truncated || len(page.Sessions) != 1 || page.Sessions[0].SessionHandle != handles[1] {
		t.Fatalf("page after %s: %+v; want %s alone of 2", handles[0], page, handles[1])
	}

	// The short session gets no heartbeat: the leader sees it expiring soon
	// once under 1 s of its 2 s is left, while the kept one is heartbeated.
	var seen api.SessionList
	soon := testcluster.WaitFor(10*time.Second, func() bool {
		if _, err := testcluster.Heartbeat(ctx, c.URL(leader), kept.SessionID); err != nil {
			t.Errorf("heartbeat: %v", err)
		}
		seen, _ = getJSON[api.SessionList](t, ctx, c.URL(leader)+"/v1/sessions")
		return seen.ExpiryKnown && seen.ExpiringSoon == 1 && seen.Count == 2
	})
	if !soon {
		t.Fatalf("the leader's listing never showed the unheartbeated session expiring soon: last %+v", seen)
	}
	for _, s := range seen.Sessions {
		if s.ExpiresInMs == nil {
			t.Fatalf("the leader's listing has no expires_in_ms for %s", s.SessionHandle)
		}
		if s.SessionHandle == left.SessionHandle && *s.ExpiresInMs >= 1000 {
			t.Fatalf("expiring soon counted, but %s has %d ms left of 2000", s.SessionHandle, *s.ExpiresInMs)
		}
		if s.SessionHandle == kept.SessionHandle && *s.ExpiresInMs < 5000 {
			t.Fatalf("the heartbeated session %s has only %d ms left of 10000", s.SessionHandle, *s.ExpiresInMs)
		}
	}
}

// TestListingQueries: the listings' query parameters are strict, and bad
// ones are 400 invalid_argument.
func TestListingQueries(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, endpoint := range []string{"/v1/locks", "/v1/elections", "/v1/sessions"} {
		for _, query := range []string{"limit=0", "limit=1001", "limit=ten", "limit=-1", "limit=1&limit=2",
			"after=a&after=b", "colour=red", "consistency=eventual", "min_index=x"} {
			status, body := send(t, ctx, "GET", base+endpoint+"?"+query, "")
			if status != http.StatusBadRequest || !strings.Contains(string(body), `"invalid_argument"`) {
				t.Errorf("GET %s?%s: status %d body %s; want 400 invalid_argument", endpoint, query, status, body)
			}
		}
		if status, body := send(t, ctx, "GET", base+endpoint+"?limit=1000", ""); status != http.StatusOK {
			t.Errorf("GET %s?limit=1000: status %d body %s; want 200", endpoint, status, body)
		}
		if status, _ := send(t, ctx, "POST", base+endpoint, "{}"); status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: status %d; want 405", endpoint, status)
		}
	}
	if status, body := send(t, ctx, "GET", base+"/v1/cluster/health?verbose=true", ""); status != http.StatusBadRequest {
		t.Errorf("GET /v1/cluster/health?verbose=true: status %d body %s; want 400", status, body)
	}
}

// TestClusterHealth: GET /v1/cluster/health on any member reports every
// member's role and indexes as it reports them, one leader, a stopped
// member as unreachable within seconds, and that member reachable again
// once it restarts.
func TestClusterHealth(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	leader := c.WaitLeader(10 * time.Second)
	viewer := c.Others(leader)[0]
	down := c.Others(leader, viewer)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testcluster.Put(ctx, c.URL(leader), "/x", "v", ""); err != nil {
		t.Fatal(err)
	}
	leaderID := api.FormatID(c.Nodes[leader].ID)
	var h api.ClusterHealth
	healthy := testcluster.WaitFor(10*time.Second, func() bool {
		h, _ = getJSON[api.ClusterHealth](t, ctx, c.URL(viewer)+"/v1/cluster/health")
		return len(h.Members) == 3 && reachable(h) == 3 && h.LeaderID == leaderID
	})
	if !healthy {
		t.Fatalf("health never showed 3 reachable members led by %s: %+v", leaderID, h)
	}
	if h.Answered != c.Nodes[viewer].Name {
		t.Fatalf("answered_by %q, want %q", h.Answered, c.Nodes[viewer].Name)
	}
	leaders := 0
	for _, m := range h.Members {
		if m.Role == "leader" {
			leaders++
			if m.ID != leaderID {
				t.Fatalf("member %s says it leads; the leader is %s", m.Name, leaderID)
			}
		}
		if m.AppliedIndex == 0 || m.Term == 0 || !m.Voter {
			t.Fatalf("member %+v: want a voter with a term and an applied index", m)
		}
	}
	if leaders != 1 {
		t.Fatalf("%d members report themselves leader: %+v", leaders, h.Members)
	}

	c.Stop(down)
	downID := api.FormatID(c.Nodes[down].ID)
	gone := testcluster.WaitFor(10*time.Second, func() bool {
		h, _ = getJSON[api.ClusterHealth](t, ctx, c.URL(viewer)+"/v1/cluster/health")
		return reachable(h) == 2
	})
	if !gone {
		t.Fatalf("the stopped member never showed unreachable: %+v", h)
	}
	for _, m := range h.Members {
		if m.ID == downID && (m.Reachable || !strings.HasPrefix(m.Error, "no status report for ") || m.Role != "" || m.Lag != 0) {
			t.Fatalf("stopped member %+v: want unreachable, an error saying for how long it was not heard from, and no status", m)
		}
	}

	c.Restart(down)
	back := testcluster.WaitFor(10*time.Second, func() bool {
		h, _ = getJSON[api.ClusterHealth](t, ctx, c.URL(viewer)+"/v1/cluster/health")
		return reachable(h) == 3 && h.LeaderID != ""
	})
	if !back {
		t.Fatalf("the restarted member never showed reachable again: %+v", h)
	}
}

func reachable(h api.ClusterHealth) int {
	n := 0
	for _, m := range h.Members {
		if m.Reachable {
			n++
		}
	}
	return n
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, x := range list {
			found = found || x == w
		}
		if !found {
			return false
		}
	}
	return true
}

func closeSession(t *testing.T, ctx context.Context, base string, s api.Session) {
	t.Helper()
	if status, body := send(t, ctx, "POST", base+"/v1/session/close", `{"session_id":"`+s.SessionID+`"}`); status != http.StatusOK {
		t.Fatalf("close session: status %d body %s", status, body)
	}
}
