package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
)

// Regression tests of issue 11 for the state machine's rules: plain writes
// cannot wedge locks or elections, sequential creates skip names taken by
// plain creates and never reuse a name, session ids are unguessable, and the
// lock and election endpoints follow the contract.

func acquireLock(ctx context.Context, base, name, session string, wait time.Duration) (api.Lock, error) {
	var out api.Lock
	err := Do(ctx, http.MethodPost, base, "/v1/lock/acquire", nil,
		api.LockRequest{Name: name, SessionID: session, WaitMs: uint64(wait.Milliseconds())}, &out)
	return out, err
}

func releaseLock(ctx context.Context, base, name, session string) error {
	return Do(ctx, http.MethodPost, base, "/v1/lock/release", nil, api.LockRequest{Name: name, SessionID: session}, nil)
}

func joinElection(ctx context.Context, base, role, session, value string) (api.Candidacy, error) {
	var out api.Candidacy
	err := Do(ctx, http.MethodPost, base, "/v1/election/join", nil, api.ElectionRequest{Role: role, SessionID: session, Value: value}, &out)
	return out, err
}

func lockState(ctx context.Context, base, name string) (api.LockState, error) {
	var out api.LockState
	err := Do(ctx, http.MethodGet, base, "/v1/lock/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

func electionState(ctx context.Context, base, role string) (api.ElectionState, error) {
	var out api.ElectionState
	err := Do(ctx, http.MethodGet, base, "/v1/election/"+url.PathEscape(role), nil, nil, &out)
	return out, err
}

func sequentialPut(ctx context.Context, base, path string) (api.Node, error) {
	return SessionPut(ctx, base, path, "x", SessionWrite{Sequential: true})
}

// sequenceOf returns the number a sequential create appended to prefix.
func sequenceOf(t *testing.T, path, prefix string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimPrefix(path, prefix), 10, 64)
	if err != nil || !strings.HasPrefix(path, prefix) {
		t.Fatalf("%q is not a sequential name of %q", path, prefix)
	}
	return n
}

// TestPlainWritesCannotWedgeLocksOrElections: a PUT under /locks or
// /elections is refused, so it can neither make a phantom holder nor take
// the next queue name, and the locks and elections work afterwards.
func TestPlainWritesCannotWedgeLocksOrElections(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := c.URL(0)
	sess, err := CreateSession(ctx, base, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	writes := []struct {
		name string
		path string
		w    SessionWrite
	}{
		{"a stray node in a lock", "/locks/X/aaa", SessionWrite{}},
		{"the next queue name of a lock", "/locks/Y/lock-0000000000", SessionWrite{}},
		{"an ephemeral queue-like node", "/locks/Y/lock-0000000001", SessionWrite{SessionID: sess.SessionID, Ephemeral: true}},
		{"an ephemeral lock directory", "/locks/Z", SessionWrite{SessionID: sess.SessionID, Ephemeral: true}},
		{"the locks root", "/locks", SessionWrite{}},
		{"a sequential node in a lock", "/locks/Y/lock-", SessionWrite{Sequential: true}},
		{"a candidate name", "/elections/R/candidate-0000000000", SessionWrite{}},
		{"the elections root", "/elections", SessionWrite{}},
	}
	for _, tt := range writes {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SessionPut(ctx, base, tt.path, "oops", tt.w)
			if api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "reserved for locks and elections") {
				t.Fatalf("PUT %s: %v, want 400 invalid_argument saying the path is reserved", tt.path, err)
			}
		})
	}
	for _, name := range []string{"X", "Y", "Z"} {
		acquireCtx, cancelAcquire := context.WithTimeout(ctx, 10*time.Second)
		lock, err := acquireLock(acquireCtx, c.URL(1), name, sess.SessionID, 5*time.Second)
		cancelAcquire()
		if err != nil || !lock.Held {
			t.Fatalf("acquire %s after the refused writes: %+v, %v; want held at once", name, lock, err)
		}
		state, err := lockState(ctx, c.URL(2), name)
		if err != nil || state.Holder == nil || state.Holder.SessionHandle != sess.SessionHandle || state.Waiters != 0 {
			t.Fatalf("lock %s state %+v, %v; want held by %s with no waiter", name, state.Holder, err, sess.SessionHandle)
		}
	}
	candidacy, err := joinElection(ctx, base, "R", sess.SessionID, "me")
	if err != nil || !candidacy.IsLeader {
		t.Fatalf("join R: %+v, %v; want the leader", candidacy, err)
	}
	// Another client cannot delete the holder's node (it would take the lock
	// from under its holder), nor the lock's directory around it.
	lock, err := acquireLock(ctx, base, "X", sess.SessionID, 0)
	if err != nil || !lock.Held {
		t.Fatalf("acquire X: %+v, %v; want held", lock, err)
	}
	if err := Delete(ctx, base, lock.Path); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("DELETE of the holder's queue node without its session: %v, want 409 precondition_failed", err)
	}
	err = Do(ctx, http.MethodDelete, base, "/v1/kv/locks/X", url.Values{"recursive": {"true"}}, nil, nil)
	if api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("recursive DELETE of a held lock's directory: %v, want 409 precondition_failed", err)
	}
	if state, err := lockState(ctx, base, "X"); err != nil || state.Holder == nil || state.Holder.SessionHandle != sess.SessionHandle {
		t.Fatalf("lock X after the refused deletes: %+v, %v; want still held by %s", state.Holder, err, sess.SessionHandle)
	}
	// Its own session may: that ends the place, as the session's end would.
	err = Do(ctx, http.MethodDelete, base, "/v1/kv"+lock.Path, url.Values{"session_id": {sess.SessionID}}, nil, nil)
	if err != nil {
		t.Fatalf("DELETE of a queue node by its session: %v", err)
	}
	if state, err := lockState(ctx, base, "X"); err != nil || state.Holder != nil {
		t.Fatalf("lock X after its node was deleted: %+v, %v; want free", state.Holder, err)
	}
	c.EnsureSame(10 * time.Second)
}

// TestSequentialCreateSkipsNamesTakenByPlainCreates: a plain create of the
// next sequential name does not make every later sequential create fail.
func TestSequentialCreateSkipsNamesTakenByPlainCreates(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := c.URL(0)

	// The issue's own steps.
	if _, err := Put(ctx, base, "/col/n-0000000000", "plain", ""); err != nil {
		t.Fatal(err)
	}
	if n, err := sequentialPut(ctx, base, "/col/n-"); err != nil {
		t.Fatalf("sequential create after a plain n-0000000000: %v", err)
	} else if n.Path == "/col/n-0000000000" {
		t.Fatalf("sequential create returned the plain node's name")
	}

	// Take the next two names by hand: the sequential create skips both.
	first, err := sequentialPut(ctx, base, "/q/n-")
	if err != nil {
		t.Fatal(err)
	}
	k := sequenceOf(t, first.Path, "/q/n-")
	for i := uint64(1); i <= 2; i++ {
		if _, err := Put(ctx, base, fmt.Sprintf("/q/n-%010d", k+i), "plain", ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(3); i <= 4; i++ {
		n, err := sequentialPut(ctx, c.URL(int(i)%3), "/q/n-")
		if err != nil {
			t.Fatalf("sequential create over names taken by plain creates: %v", err)
		}
		if got := sequenceOf(t, n.Path, "/q/n-"); got != k+i {
			t.Fatalf("sequential create made %s, want number %d (skipping the two taken names)", n.Path, k+i)
		}
	}
	children, err := ChildrenAt(ctx, base, "/q", api.Linearizable, 0)
	if err != nil || len(children.Children) != 5 {
		t.Fatalf("children of /q: %+v, %v; want 5", children.Children, err)
	}
	c.EnsureSame(10 * time.Second)
}

// TestSequentialNamesNeverReusedAfterRecreate: a parent deleted and made
// again continues above every number it handed out, on every replica,
// across snapshots and restarts; so does a lock's queue.
func TestSequentialNamesNeverReusedAfterRecreate(t *testing.T) {
	c := New(t, 3, Options{SnapshotEvery: 20})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := c.URL(0)
	seen := map[string]bool{}
	var highest uint64
	for round := 0; round < 4; round++ {
		for i := 0; i < 5; i++ {
			n, err := sequentialPut(ctx, base, "/r/s-")
			if err != nil {
				t.Fatal(err)
			}
			number := sequenceOf(t, n.Path, "/r/s-")
			if seen[n.Path] || number <= highest && highest != 0 {
				t.Fatalf("round %d: %s reuses or goes back (highest so far %d)", round, n.Path, highest)
			}
			seen[n.Path], highest = true, number
		}
		if err := Do(ctx, http.MethodDelete, base, "/v1/kv/r", url.Values{"recursive": {"true"}}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if round == 1 { // restart a follower from its snapshot and log
			follower := c.Others(c.WaitLeader(10 * time.Second))[0]
			c.Crash(follower)
			c.Restart(follower)
		}
	}

	sess, err := CreateSession(ctx, base, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := 0; i < 3; i++ {
		lock, err := acquireLock(ctx, base, "L", sess.SessionID, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, lock.Path)
		if err := releaseLock(ctx, base, "L", sess.SessionID); err != nil {
			t.Fatal(err)
		}
		if err := Do(ctx, http.MethodDelete, base, "/v1/kv/locks/L", url.Values{"recursive": {"true"}}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if paths[0] == paths[1] || paths[1] == paths[2] || paths[0] == paths[2] {
		t.Fatalf("lock queue node names reused across recreations of the lock: %v", paths)
	}
	c.EnsureSame(20 * time.Second)
}

// TestSessionIDsAreUnguessable: ids are random 64-bit values, not the
// index of the create entry, and work across snapshots and restarts.
func TestSessionIDsAreUnguessable(t *testing.T) {
	c := New(t, 3, Options{SnapshotEvery: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []uint64
	highBits := 0
	for i := 0; i < 16; i++ {
		s, err := CreateSession(ctx, c.URL(i%3), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		id, err := api.ParseID(s.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		if id == s.Index || id+1 == s.Index || id == s.Index+1 {
			t.Fatalf("session id %s is the create entry's index %d", s.SessionID, s.Index)
		}
		if id>>48 != 0 {
			highBits++
		}
		for _, other := range ids {
			if d := int64(id - other); d > -1000 && d < 1000 {
				t.Fatalf("session ids %#x and %#x are %d apart: guessable", id, other, d)
			}
		}
		ids = append(ids, id)
	}
	if highBits < 8 { // a random id has bits above 2^48 with probability 1-2^-16
		t.Fatalf("only %d of 16 ids use the high bits: %x", highBits, ids)
	}
	// The sessions are real: they own nodes, survive a restart from a
	// snapshot, and close.
	id := api.FormatID(ids[0])
	if _, err := SessionPut(ctx, c.URL(0), "/eph", "v", SessionWrite{SessionID: id, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	follower := c.Others(c.WaitLeader(10 * time.Second))[0]
	c.Crash(follower)
	c.Restart(follower)
	c.EnsureSame(20 * time.Second)
	if n, err := GetAt(ctx, c.URL(follower), "/eph", api.Linearizable, 0); err != nil || n.OwnerHandle != sessionHandle(t, id) {
		t.Fatalf("ephemeral node after restart: %+v, %v; want owned by %s", n, err, id)
	}
	if err := Do(ctx, http.MethodPost, c.URL(follower), "/v1/session/close", nil, api.SessionRequest{SessionID: id}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := GetAt(ctx, c.URL(0), "/eph", api.Linearizable, 0); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("ephemeral node after its session closed: %v, want not_found", err)
	}
}

// TestLockAndElectionContract: state reads of a lock or role never used are
// 404; a second join with a new value updates it; errors name a role a role.
func TestLockAndElectionContract(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := c.URL(0)
	if _, err := lockState(ctx, base, "never"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("GET /v1/lock/never: %v, want 404 not_found", err)
	}
	if _, err := electionState(ctx, base, "never"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("GET /v1/election/never: %v, want 404 not_found", err)
	}
	sess, err := CreateSession(ctx, base, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquireLock(ctx, base, "used", sess.SessionID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := releaseLock(ctx, base, "used", sess.SessionID); err != nil {
		t.Fatal(err)
	}
	if state, err := lockState(ctx, c.URL(1), "used"); err != nil || state.Holder != nil {
		t.Fatalf("GET /v1/lock/used after release: %+v, %v; want 200 with no holder", state, err)
	}

	first, err := joinElection(ctx, base, "db", sess.SessionID, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	second, err := joinElection(ctx, c.URL(1), "db", sess.SessionID, "host-b")
	if err != nil {
		t.Fatal(err)
	}
	if second.FencingToken != first.FencingToken || !second.IsLeader {
		t.Errorf("second join: %+v, want the same candidacy (token %d) still leading", second, first.FencingToken)
	}
	state, err := electionState(ctx, c.URL(2), "db")
	if err != nil || state.Leader == nil || state.Leader.Value != "host-b" || state.Candidates != 1 {
		t.Errorf("election state after a join with a new value: %+v, %v; want leader value host-b, 1 candidate", state.Leader, err)
	}

	_, err = joinElection(ctx, base, "a/b", sess.SessionID, "x")
	if api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `role "a/b"`) {
		t.Errorf("join of role a/b: %v, want invalid_argument naming the role", err)
	}
	_, err = acquireLock(ctx, base, "a/b", sess.SessionID, 0)
	if api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `name "a/b"`) {
		t.Errorf("acquire of lock a/b: %v, want invalid_argument naming the name", err)
	}
	c.EnsureSame(10 * time.Second)
}

// TestLostLockNamesItsSessionOnce: the reason a lock was lost names the
// session once, not once per layer that wrapped it.
func TestLostLockNamesItsSessionOnce(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(client.Config{Endpoints: c.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lock := recipe.NewLock(s, "lost")
	if _, err := lock.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	lost := lock.Lost()
	// Another party ends the session; the client hears it at its next heartbeat.
	if err := Do(ctx, http.MethodPost, c.URL(1), "/v1/session/close", nil, api.SessionRequest{SessionID: s.ID()}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("the lock was not reported lost after its session was closed")
	}
	err = lock.Err()
	if !errors.Is(err, recipe.ErrLost) {
		t.Fatalf("lock.Err() = %v, want ErrLost", err)
	}
	if n := strings.Count(err.Error(), s.ID()); n != 1 {
		t.Fatalf("lost lock's message names session %s %d times, want once: %q", s.ID(), n, err)
	}
}

// TestWaiterPlaceIsDeferred: the place of a session that will wait behind
// another's is proposed deferred (it may wait a little to share a WAL save
// with another write): the cluster counts one deferred
// proposal (where it waited: at the leader, if the member is a follower),
// and the place works as any other: granted, with a larger token, once the
// holder releases.
func TestWaiterPlaceIsDeferred(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	at := c.URL(0)
	deferred := func() float64 { // over the members: a follower's wait at the leader
		sum := 0.0
		for i := range c.Nodes {
			sc := scrapeMetrics(t, ctx, c.URL(i))
			joined, _ := sc.value("latch_raft_deferred_proposals_total", "shard", "0", "left", "joined")
			alone, _ := sc.value("latch_raft_deferred_proposals_total", "shard", "0", "left", "alone")
			sum += joined + alone
		}
		return sum
	}
	a := createSession(t, ctx, at, 20*time.Second).SessionID
	b := createSession(t, ctx, at, 20*time.Second).SessionID
	held, err := acquireLock(ctx, at, "D", a, time.Second)
	if err != nil || !held.Held {
		t.Fatalf("a's acquire: %+v, %v", held, err)
	}
	if n := deferred(); n != 0 {
		t.Fatalf("%v deferred proposals after an acquire of a free lock, want 0", n)
	}
	if _, err := acquireLock(ctx, at, "D", b, 10*time.Millisecond); api.CodeOf(err) != api.CodeLockNotHeld {
		t.Fatalf("b's acquire behind a: %v, want lock_not_held after its wait", err)
	}
	if n := deferred(); n != 1 {
		t.Fatalf("%v deferred proposals after an acquire behind a holder, want 1", n)
	}
	if err := releaseLock(ctx, at, "D", a); err != nil {
		t.Fatal(err)
	}
	got, err := acquireLock(ctx, at, "D", b, 10*time.Second)
	if err != nil || !got.Held || got.FencingToken <= held.FencingToken {
		t.Fatalf("b's acquire after a's release: %+v, %v; want held with a token above %d", got, err, held.FencingToken)
	}
}
