package testcluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// sessionHandle is the public handle of session id, as reads show it.
func sessionHandle(t *testing.T, id string) string {
	t.Helper()
	handle, err := api.SessionHandleOf(id)
	if err != nil {
		t.Fatalf("session id %q: %v", id, err)
	}
	return handle
}

// TestReadsShowHandlesNotIDs (issue 11 item 5): a session id is a bearer
// secret, so another session's reads of a lock, an election, an ephemeral
// node and the children listings name the holder by its handle and never
// carry its id; the owner recognises itself by the session_handle of its
// own replies; and nothing a reader learned lets it act as the holder: the
// handle used as a session_id is refused for release, resign, close,
// heartbeat, writes, acquire and watches, and the holder still holds all.
func TestReadsShowHandlesNotIDs(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	holder := createSession(t, ctx, c.URL(0), 30*time.Second)
	observer := createSession(t, ctx, c.URL(1), 30*time.Second)
	if holder.SessionHandle != sessionHandle(t, holder.SessionID) || holder.SessionHandle == holder.SessionID {
		t.Fatalf("created session %+v: want session_handle %s", holder, sessionHandle(t, holder.SessionID))
	}
	lock, candidacy := holderTakesEverything(t, ctx, c, holder)
	if lock.SessionHandle != holder.SessionHandle || candidacy.SessionHandle != holder.SessionHandle {
		t.Fatalf("acquire %+v / join %+v: want the holder's own session_handle %s", lock, candidacy, holder.SessionHandle)
	}
	var own api.Session
	if err := Do(ctx, http.MethodGet, c.URL(2), "/v1/session/"+holder.SessionID, nil, nil, &own); err != nil || own.SessionHandle != holder.SessionHandle {
		t.Fatalf("GET of the holder's own session: %+v, %v; want session_handle %s", own, err, holder.SessionHandle)
	}

	observed := observeHolder(t, ctx, c.URL(2), holder.SessionID)
	if observed.lock.SessionHandle != holder.SessionHandle || observed.lock.FencingToken != lock.FencingToken ||
		observed.leader.SessionHandle != holder.SessionHandle || observed.owner != holder.SessionHandle {
		t.Fatalf("reads %+v / %+v / owner %q: want the holder's handle %s (the owner recognises itself)",
			observed.lock, observed.leader, observed.owner, holder.SessionHandle)
	}

	impersonateWith(t, ctx, c.URL(1), holder.SessionHandle, lock.FencingToken, observer.SessionID)
	impersonateWith(t, ctx, c.URL(1), strings.TrimPrefix(holder.SessionHandle, "0x"), lock.FencingToken, observer.SessionID)

	after := observeHolder(t, ctx, c.URL(0), holder.SessionID)
	if after.lock != observed.lock || after.leader != observed.leader || after.owner != holder.SessionHandle {
		t.Fatalf("after the attempts: lock %+v, leader %+v, owner %q; want unchanged %+v, %+v, %s",
			after.lock, after.leader, after.owner, observed.lock, observed.leader, holder.SessionHandle)
	}
	if hb, err := Heartbeat(ctx, c.URL(0), holder.SessionID); err != nil || !hb.Alive {
		t.Fatalf("holder's heartbeat: %+v, %v; want alive", hb, err)
	}
	c.EnsureSame(20 * time.Second)
}

// holderTakesEverything makes session s hold lock R, lead election db and
// own the ephemeral node /eph/owned.
func holderTakesEverything(t *testing.T, ctx context.Context, c *Cluster, s api.Session) (api.Lock, api.Candidacy) {
	t.Helper()
	var lock api.Lock
	if err := Do(ctx, http.MethodPost, c.URL(0), "/v1/lock/acquire", nil, api.LockRequest{Name: "R", SessionID: s.SessionID}, &lock); err != nil || !lock.Held {
		t.Fatalf("acquire: %+v, %v", lock, err)
	}
	var candidacy api.Candidacy
	if err := Do(ctx, http.MethodPost, c.URL(1), "/v1/election/join", nil, api.ElectionRequest{Role: "db", SessionID: s.SessionID, Value: "primary"}, &candidacy); err != nil || !candidacy.IsLeader {
		t.Fatalf("join: %+v, %v", candidacy, err)
	}
	if err := Do(ctx, http.MethodPut, c.URL(2), "/v1/kv/eph", nil, api.PutRequest{Value: ""}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := SessionPut(ctx, c.URL(0), "/eph/owned", "v", SessionWrite{SessionID: s.SessionID, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	return lock, candidacy
}

// observedHolder is what reads show of the holder.
type observedHolder struct {
	lock   api.Holder
	leader api.Leader
	owner  string // owner_handle of /eph/owned
}

// observeHolder reads, as anyone can, the lock, the election, the
// ephemeral node and the listings around them through base, failing the
// test if any reply carries secret (in any letter case, with or without
// its 0x).
func observeHolder(t *testing.T, ctx context.Context, base, secret string) observedHolder {
	t.Helper()
	bare := strings.ToLower(strings.TrimPrefix(secret, "0x"))
	for _, path := range []string{"/v1/lock/R", "/v1/election/db", "/v1/kv/eph/owned", "/v1/kv/eph?children=true",
		"/v1/kv/locks/R?children=true", "/v1/kv/elections/db?children=true"} {
		reply := hostileCall(t, ctx, http.MethodGet, base+path, "")
		if reply.status != http.StatusOK || strings.Contains(strings.ToLower(string(reply.body)), bare) {
			t.Fatalf("GET %s: status %d, body %s: a read must not carry the holder's id %s", path, reply.status, reply.body, secret)
		}
	}
	var out observedHolder
	var lock api.LockState
	var election api.ElectionState
	var node api.Node
	if err := Do(ctx, http.MethodGet, base, "/v1/lock/R", nil, nil, &lock); err != nil || lock.Holder == nil {
		t.Fatalf("lock state: %+v, %v", lock, err)
	}
	if err := Do(ctx, http.MethodGet, base, "/v1/election/db", nil, nil, &election); err != nil || election.Leader == nil {
		t.Fatalf("election state: %+v, %v", election, err)
	}
	if err := Do(ctx, http.MethodGet, base, "/v1/kv/eph/owned", nil, nil, &node); err != nil || !node.Ephemeral {
		t.Fatalf("ephemeral node: %+v, %v", node, err)
	}
	out.lock, out.leader, out.owner = *lock.Holder, *election.Leader, node.OwnerHandle
	return out
}

// impersonateWith tries every act of a session with handle as its
// session_id, through base, and fails the test unless each is refused with
// the code of an unknown session: a handle names no session, and a release
// or resign that finds no place asks after the session before answering
// that it holds nothing (queues.notQueued).
func impersonateWith(t *testing.T, ctx context.Context, base, handle string, token uint64, observer string) {
	t.Helper()
	tries := []struct {
		name  string
		call  func() error
		codes []api.Code
	}{
		{"release", func() error {
			return Do(ctx, http.MethodPost, base, "/v1/lock/release", nil, api.LockRequest{Name: "R", SessionID: handle, FencingToken: token}, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"resign", func() error {
			return Do(ctx, http.MethodPost, base, "/v1/election/resign", nil, api.ElectionRequest{Role: "db", SessionID: handle}, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"close", func() error {
			return Do(ctx, http.MethodPost, base, "/v1/session/close", nil, api.SessionRequest{SessionID: handle}, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"heartbeat", func() error { _, err := Heartbeat(ctx, base, handle); return err }, []api.Code{api.CodeSessionExpired}},
		{"batched heartbeat", func() error {
			// A batch answers 200 and lists the dead: being listed is the refusal.
			hb, err := Heartbeat(ctx, base, observer, handle)
			if err == nil && !hb.Alive && len(hb.Expired) == 1 {
				return api.Errorf(api.CodeSessionExpired, "listed as expired")
			}
			return fmt.Errorf("heartbeat %+v, %w", hb, err)
		}, []api.Code{api.CodeSessionExpired}},
		{"get session", func() error {
			return Do(ctx, http.MethodGet, base, "/v1/session/"+handle, nil, nil, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"overwrite the ephemeral node", func() error {
			_, err := SessionPut(ctx, base, "/eph/owned", "stolen", SessionWrite{SessionID: handle, RequestSeq: 1, Ephemeral: true})
			return err
		}, []api.Code{api.CodeSessionExpired}},
		{"delete the ephemeral node", func() error {
			_, err := SessionDelete(ctx, base, "/eph/owned", SessionWrite{SessionID: handle, RequestSeq: 2})
			return err
		}, []api.Code{api.CodeSessionExpired}},
		{"acquire", func() error {
			return Do(ctx, http.MethodPost, base, "/v1/lock/acquire", nil, api.LockRequest{Name: "R", SessionID: handle}, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"join", func() error {
			return Do(ctx, http.MethodPost, base, "/v1/election/join", nil, api.ElectionRequest{Role: "db", SessionID: handle, Value: "usurper"}, nil)
		}, []api.Code{api.CodeSessionExpired}},
		{"watch", func() error {
			_, err := AddWatch(ctx, base, api.WatchRequest{Path: "/eph", SessionID: handle})
			return err
		}, []api.Code{api.CodeSessionExpired}},
	}
	for _, try := range tries {
		err := try.call()
		code := api.CodeOf(err)
		refused := false
		for _, want := range try.codes {
			refused = refused || code == want
		}
		if !refused {
			t.Errorf("%s with the holder's handle %q as session_id: %v; want one of %v", try.name, handle, err, try.codes)
		}
	}
}
