package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/placement"
)

// The cross-shard protocols end to end, in a 3-member cluster of 4 shards
// (docs/design.md, "Commands and server steps"): creates under directories
// whose children live in another shard than their node, mkdir -p across
// shards, sequential names per directory, ephemeral nodes of one session in
// several shards vanishing when it closes or expires, a create racing its
// session's end, and locks in several shards.

const wiringShards = 4

// newShardedCluster starts 3 members with 4 shards and waits until every
// shard has a leader.
func newShardedCluster(t *testing.T) *Cluster {
	t.Helper()
	return newShardedClusterWith(t, Options{})
}

// newShardedClusterWith is newShardedCluster with opts (Shards is set).
func newShardedClusterWith(t *testing.T, opts Options) *Cluster {
	t.Helper()
	opts.Shards = wiringShards
	c := New(t, 3, opts)
	c.WaitBalanced(30 * time.Second)
	return c
}

// again runs op until it answers something else than 503 unavailable (a
// leader change or an overloaded machine: the write's outcome is unknown,
// and the operations retried this way are idempotent) or ctx ends. retried
// says whether an attempt before the last answered 503.
func again(ctx context.Context, op func() error) (err error, retried bool) {
	for {
		err = op()
		if api.CodeOf(err) != api.CodeUnavailable || ctx.Err() != nil {
			return err, retried
		}
		retried = true
		select {
		case <-ctx.Done():
			return err, retried
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// put is Put, retried on 503.
func put(ctx context.Context, base, path, value, prev string) (api.Node, error) {
	var n api.Node
	err, _ := again(ctx, func() (err error) { n, err = Put(ctx, base, path, value, prev); return err })
	return n, err
}

// sessionPut is SessionPut, retried on 503.
func sessionPut(ctx context.Context, base, path, value string, w SessionWrite) (api.Node, error) {
	var n api.Node
	err, _ := again(ctx, func() (err error) { n, err = SessionPut(ctx, base, path, value, w); return err })
	return n, err
}

// do is Do, retried on 503; a DELETE or a session close answered 404 or 410
// after a retry is taken as done by an attempt whose reply was lost.
func do(ctx context.Context, method, base, path string, q url.Values, in, out any) error {
	err, retried := again(ctx, func() error { return Do(ctx, method, base, path, q, in, out) })
	if retried && (api.CodeOf(err) == api.CodeNotFound || api.CodeOf(err) == api.CodeSessionExpired) {
		return nil
	}
	return err
}

// newSession is CreateSession, retried on 503.
func newSession(ctx context.Context, base string, timeout time.Duration) (api.Session, error) {
	var out api.Session
	err, _ := again(ctx, func() (err error) { out, err = CreateSession(ctx, base, timeout); return err })
	return out, err
}

// acquire is acquireLock (which keeps a session's place), retried on 503.
func acquire(ctx context.Context, base, name, session string, wait time.Duration) (api.Lock, error) {
	var out api.Lock
	err, _ := again(ctx, func() (err error) { out, err = acquireLock(ctx, base, name, session, wait); return err })
	return out, err
}

// join is joinElection (which keeps a session's place), retried on 503.
func join(ctx context.Context, base, role, session, value string) (api.Candidacy, error) {
	var out api.Candidacy
	err, _ := again(ctx, func() (err error) { out, err = joinElection(ctx, base, role, session, value); return err })
	return out, err
}

// crossShardDirs returns, under parent, one directory per shard other than
// the one holding the directories' own nodes, each holding its children in
// that shard: a directory whose node and children are in different shards.
func crossShardDirs(t *testing.T, parent string) map[int]string {
	t.Helper()
	m, err := placement.New(wiringShards)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[int]string{}
	for i := 0; len(dirs) < wiringShards-1 && i < 10000; i++ {
		d := fmt.Sprintf("%s/d%d", parent, i)
		if c := m.ChildShard(d); c != m.Shard(d) && dirs[c] == "" {
			dirs[c] = d
		}
	}
	if len(dirs) < wiringShards-1 {
		t.Fatalf("found directories in shards %v only", dirs)
	}
	return dirs
}

func TestShardsCreatesUnderDirectoriesInOtherShards(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dirs := crossShardDirs(t, "/app/cfg")
	for shard, dir := range dirs {
		// mkdir -p: /app, /app/cfg, dir and dir/sub are made, each in
		// its own shard.
		key := dir + "/sub/key"
		if _, err := put(ctx, c.URL(shard%3), key, "v-"+dir, ""); err != nil {
			t.Fatalf("put %s (children of %s in shard %d): %v", key, dir, shard, err)
		}
		for i := range c.Nodes {
			n, err := Get(ctx, c.URL(i), key, "linearizable")
			if err != nil || n.Value != "v-"+dir {
				t.Fatalf("node %d: get %s = %+v, %v", i, key, n, err)
			}
			if _, err := Get(ctx, c.URL(i), dir+"/sub", "linearizable"); err != nil {
				t.Fatalf("node %d: the ancestor %s/sub was not made: %v", i, dir, err)
			}
		}
		// A second create under the now open directory record.
		if _, err := put(ctx, c.URL(0), dir+"/other", "x", "none"); err != nil {
			t.Fatalf("put %s/other: %v", dir, err)
		}
		// Sequential names under one directory strictly increase.
		var names []string
		for range 5 {
			n, err := sessionPut(ctx, c.URL(1), dir+"/n-", "", SessionWrite{Sequential: true})
			if err != nil {
				t.Fatalf("sequential put under %s: %v", dir, err)
			}
			names = append(names, n.Path)
		}
		if !sort.StringsAreSorted(names) || names[0] == names[len(names)-1] {
			t.Fatalf("sequential names under %s: %v, want strictly increasing", dir, names)
		}
		for i := 1; i < len(names); i++ {
			if names[i] == names[i-1] {
				t.Fatalf("sequential names under %s repeat: %v", dir, names)
			}
		}
	}
	// A create under an ephemeral node is refused, across shards too.
	s, err := newSession(ctx, c.URL(0), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		eph := dir + "/eph"
		if _, err := sessionPut(ctx, c.URL(0), eph, "", SessionWrite{SessionID: s.SessionID, Ephemeral: true}); err != nil {
			t.Fatalf("ephemeral put %s: %v", eph, err)
		}
		if _, err := put(ctx, c.URL(2), eph+"/child", "x", ""); api.CodeOf(err) != api.CodeInvalidArgument {
			t.Fatalf("put under the ephemeral %s: %v, want invalid_argument", eph, err)
		}
		break
	}
}

// ephemeralsIn creates an ephemeral node of session in each directory of
// dirs and returns their paths.
func ephemeralsIn(t *testing.T, ctx context.Context, c *Cluster, session string, dirs map[int]string) []string {
	t.Helper()
	var paths []string
	for shard, dir := range dirs {
		p := dir + "/owned"
		if _, err := sessionPut(ctx, c.URL(shard%3), p, "", SessionWrite{SessionID: session, Ephemeral: true}); err != nil {
			t.Fatalf("ephemeral put %s (shard %d): %v", p, shard, err)
		}
		paths = append(paths, p)
	}
	return paths
}

// goneEverywhere reports whether every path is not found on every member.
func goneEverywhere(ctx context.Context, c *Cluster, paths []string) (bool, error) {
	for i := range c.Nodes {
		for _, p := range paths {
			_, err := Get(ctx, c.URL(i), p, "linearizable")
			if err == nil {
				return false, nil
			}
			if api.CodeOf(err) != api.CodeNotFound {
				return false, fmt.Errorf("node %d: get %s: %w", i, p, err)
			}
		}
	}
	return true, nil
}

func TestShardsSessionEndDeletesEphemeralsInEveryShard(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	closed, err := newSession(ctx, c.URL(0), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	paths := ephemeralsIn(t, ctx, c, closed.SessionID, crossShardDirs(t, "/closing"))
	if err := do(ctx, http.MethodPost, c.URL(1), "/v1/session/close", nil, api.SessionRequest{SessionID: closed.SessionID}, nil); err != nil {
		t.Fatalf("close: %v", err)
	}
	// A close is answered once every shard deleted the session's nodes.
	if gone, err := goneEverywhere(ctx, c, paths); err != nil || !gone {
		t.Fatalf("after the close answered, the session's ephemeral nodes %v are still there (%v)", paths, err)
	}
	// A write of the closed session in another shard is refused.
	for _, p := range paths {
		if _, err := sessionPut(ctx, c.URL(2), p, "", SessionWrite{SessionID: closed.SessionID, Ephemeral: true}); api.CodeOf(err) != api.CodeSessionExpired {
			t.Fatalf("ephemeral put %s of a closed session: %v, want session_expired", p, err)
		}
	}

	expiring, err := newSession(ctx, c.URL(2), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	paths = ephemeralsIn(t, ctx, c, expiring.SessionID, crossShardDirs(t, "/expiring"))
	// No heartbeat: the session expires and its nodes vanish in every shard.
	if !waitFor(30*time.Second, func() bool { gone, _ := goneEverywhere(ctx, c, paths); return gone }) {
		t.Fatalf("the ephemeral nodes %v of an expired session are still there", paths)
	}
}

// TestShardsCreateRacingSessionEndNeverLeaks races ephemeral creates in
// several shards with the close of their session: every create is either
// deleted by the end or refused, so after the close no node is left.
func TestShardsCreateRacingSessionEndNeverLeaks(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dirs := crossShardDirs(t, "/race")
	for _, dir := range dirs {
		if _, err := put(ctx, c.URL(0), dir+"/seed", "x", ""); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		s, err := newSession(ctx, c.URL(0), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			tried []string
		)
		for shard, dir := range dirs {
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						p := fmt.Sprintf("%s/r%d-w%d-%d", dir, round, w, i)
						mu.Lock()
						tried = append(tried, p)
						mu.Unlock()
						_, err := sessionPut(ctx, c.URL((shard+w)%3), p, "", SessionWrite{SessionID: s.SessionID, Ephemeral: true})
						if api.CodeOf(err) == api.CodeSessionExpired || ctx.Err() != nil {
							return
						}
					}
				}()
			}
		}
		// Let some creates in, then close while the others are in flight.
		if !waitFor(20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(tried) > 12 }) {
			t.Fatal("the creates made no progress")
		}
		if err := do(ctx, http.MethodPost, c.URL(round%3), "/v1/session/close", nil, api.SessionRequest{SessionID: s.SessionID}, nil); err != nil {
			t.Fatalf("close: %v", err)
		}
		wg.Wait()
		// Every cleanup the close started has applied once the close
		// answered; a create that was refused made nothing.
		if !waitFor(20*time.Second, func() bool { gone, _ := goneEverywhere(ctx, c, tried); return gone }) {
			gone, err := goneEverywhere(ctx, c, tried)
			t.Fatalf("round %d: a node of the ended session was leaked among %d creates (%v, %v)", round, len(tried), gone, err)
		}
	}
}

// namesInEveryShard returns, by shard, a name made by format from a
// number whose node under parent has its children in that shard (a lock's
// or an election's queue lives in its node's children shard).
func namesInEveryShard(parent, format string) map[int]string {
	m, _ := placement.New(wiringShards)
	names := map[int]string{}
	for i := 0; len(names) < wiringShards && i < 10000; i++ {
		name := fmt.Sprintf(format, i)
		if k := m.ChildShard(parent + name); names[k] == "" {
			names[k] = name
		}
	}
	return names
}

func TestShardsLocksInSeveralShards(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	locks := namesInEveryShard("/locks/", "job-%d")
	for shard, name := range locks {
		if _, err := lockState(ctx, c.URL(shard%3), name); api.CodeOf(err) != api.CodeNotFound {
			t.Fatalf("state of the never used lock %s (shard %d): %v, want not_found", name, shard, err)
		}
	}
	a, err := newSession(ctx, c.URL(0), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSession(ctx, c.URL(1), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for shard, name := range locks {
		var last uint64
		for round := range 3 {
			holder := []api.Session{a, b}[round%2]
			lock, err := acquire(ctx, c.URL((shard+round)%3), name, holder.SessionID, 10*time.Second)
			if err != nil || !lock.Held {
				t.Fatalf("lock %s (shard %d), round %d: %+v, %v", name, shard, round, lock, err)
			}
			if lock.FencingToken <= last {
				t.Fatalf("lock %s: token %d after %d, want strictly increasing", name, lock.FencingToken, last)
			}
			last = lock.FencingToken
			if err := do(ctx, http.MethodPost, c.URL(round%3), "/v1/lock/release", nil, api.LockRequest{Name: name, SessionID: holder.SessionID}, nil); err != nil {
				t.Fatalf("release %s: %v", name, err)
			}
		}
	}
	// A waiter in another shard than 0 wakes when the holder's session
	// ends (its queue place is deleted by that shard's cleanup).
	var name string
	for shard, n := range locks {
		if shard != 0 {
			name = n
			break
		}
	}
	if lock, err := acquire(ctx, c.URL(0), name, a.SessionID, time.Second); err != nil || !lock.Held {
		t.Fatalf("acquire %s: %+v, %v", name, lock, err)
	}
	woke := make(chan error, 1)
	go func() {
		lock, err := acquire(ctx, c.URL(2), name, b.SessionID, 30*time.Second)
		if err == nil && !lock.Held {
			err = errors.New("not held after the wait")
		}
		woke <- err
	}()
	if err := do(ctx, http.MethodPost, c.URL(1), "/v1/session/close", nil, api.SessionRequest{SessionID: a.SessionID}, nil); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("the waiter of %s: %v", name, err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock its holder's end released")
	}
}

func TestShardsDeletesAndListingsAcrossShards(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recursive := url.Values{"recursive": {"true"}}
	for shard, dir := range crossShardDirs(t, "/del") {
		for _, p := range []string{dir + "/a", dir + "/b/c"} {
			if _, err := put(ctx, c.URL(shard%3), p, "v", ""); err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
		}
		// Get's children_count and the listing come from the children's
		// shard.
		n, err := Get(ctx, c.URL(1), dir, "linearizable")
		if err != nil || n.ChildrenCount != 2 || n.ChildrenIndex == 0 {
			t.Fatalf("get %s: %+v, %v; want 2 children counted in shard %d, with its index", dir, n, err, shard)
		}
		var list api.Children
		if err := Do(ctx, http.MethodGet, c.URL(2), "/v1/kv"+dir, url.Values{"children": {"true"}}, nil, &list); err != nil ||
			!slices.Equal(list.Children, []string{"a", "b"}) {
			t.Fatalf("children of %s: %+v, %v; want [a b]", dir, list, err)
		}
		// A directory with children is not deleted, and stays usable.
		if err, _ := again(ctx, func() error { return Delete(ctx, c.URL(0), dir) }); api.CodeOf(err) != api.CodePreconditionFailed {
			t.Fatalf("delete of the non-empty %s: %v, want precondition_failed", dir, err)
		}
		if _, err := put(ctx, c.URL(0), dir+"/after-refusal", "v", "none"); err != nil {
			t.Fatalf("a create under %s after its refused delete: %v", dir, err)
		}
		before, err := sessionPut(ctx, c.URL(0), dir+"/n-", "", SessionWrite{Sequential: true})
		if err != nil {
			t.Fatal(err)
		}
		// A recursive delete across shards, bottom-up.
		if err := do(ctx, http.MethodDelete, c.URL(1), "/v1/kv"+dir, recursive, nil, nil); err != nil {
			t.Fatalf("recursive delete of %s: %v", dir, err)
		}
		if gone, err := goneEverywhere(ctx, c, []string{dir, dir + "/a", dir + "/b", dir + "/b/c", before.Path}); err != nil || !gone {
			t.Fatalf("after the recursive delete of %s something is left (%v)", dir, err)
		}
		// Re-created, the directory's sequential names continue above the
		// old incarnation's.
		after, err := sessionPut(ctx, c.URL(2), dir+"/n-", "", SessionWrite{Sequential: true})
		if err != nil || after.Path <= before.Path {
			t.Fatalf("sequential name after the re-create %q (%v), want above %q", after.Path, err, before.Path)
		}
		// An empty directory whose children live elsewhere: the close
		// protocol deletes it.
		if err := do(ctx, http.MethodDelete, c.URL(0), "/v1/kv"+after.Path, nil, nil, nil); err != nil {
			t.Fatalf("delete %s: %v", after.Path, err)
		}
		if err := do(ctx, http.MethodDelete, c.URL(0), "/v1/kv"+dir, nil, nil, nil); err != nil {
			t.Fatalf("delete of the empty %s: %v", dir, err)
		}
		if _, err := Get(ctx, c.URL(2), dir, "linearizable"); api.CodeOf(err) != api.CodeNotFound {
			t.Fatalf("get %s after its delete: %v, want not_found", dir, err)
		}
	}
}

// TestShardsSessionCleanupResumesAfterTheMetaLeaderCrashes crashes the
// member leading shard 0 with ephemeral nodes of a session in several
// shards; the session then expires, and the new leader of shard 0 runs its
// cleanup in every shard.
func TestShardsSessionCleanupResumesAfterTheMetaLeaderCrashes(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := newSession(ctx, c.URL(0), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	paths := ephemeralsIn(t, ctx, c, s.SessionID, crossShardDirs(t, "/resume"))
	leader := 0
	for _, i := range c.Running() {
		if id := c.shardLeaders(i)[0]; id != "" {
			for j, n := range c.Nodes {
				if api.FormatID(n.ID) == id {
					leader = j
				}
			}
			break
		}
	}
	c.Crash(leader)
	survivors := c.Running()
	if !waitFor(60*time.Second, func() bool {
		for _, i := range survivors {
			for _, p := range paths {
				if _, err := Get(ctx, c.URL(i), p, "linearizable"); api.CodeOf(err) != api.CodeNotFound {
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("after shard 0's leader crashed, the expired session's nodes %v were not all deleted", paths)
	}
}

// TestShardsElectionsInSeveralShards: elections whose candidate queues are
// in every shard elect their first candidate, and the next one leads once
// the leader resigns.
func TestShardsElectionsInSeveralShards(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roles := namesInEveryShard("/elections/", "svc-%d")
	a, err := newSession(ctx, c.URL(0), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSession(ctx, c.URL(1), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for shard, role := range roles {
		first, err := join(ctx, c.URL(shard%3), role, a.SessionID, "a")
		if err != nil || !first.IsLeader {
			t.Fatalf("role %s (shard %d): first candidate %+v, %v; want the leader", role, shard, first, err)
		}
		second, err := join(ctx, c.URL((shard+1)%3), role, b.SessionID, "b")
		if err != nil || second.IsLeader || second.FencingToken <= first.FencingToken {
			t.Fatalf("role %s: second candidate %+v, %v; want a follower with a higher token than %d", role, second, err, first.FencingToken)
		}
		if err := do(ctx, http.MethodPost, c.URL(2), "/v1/election/resign", nil, api.ElectionRequest{Role: role, SessionID: a.SessionID}, nil); err != nil {
			t.Fatalf("resign %s: %v", role, err)
		}
		st, err := electionState(ctx, c.URL(shard%3), role)
		if err != nil || st.Leader == nil || st.Leader.Value != "b" || st.Candidates != 1 {
			t.Fatalf("role %s after the leader resigned: %+v, %v; want b leading alone", role, st, err)
		}
	}
}
