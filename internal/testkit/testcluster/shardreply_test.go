package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// Every reply whose index is of one shard names that shard (docs/api.md,
// "Sharded clusters"): X-Latch-Shard beside X-Latch-Index, and in the body
// of lock and election replies; a session close gives each shard's index.
// With one shard nothing of this is sent.

// doHeader is DoHeader, retried on 503.
func doHeader(ctx context.Context, method, base, path string, q url.Values, in, out any) (http.Header, error) {
	var header http.Header
	err, _ := again(ctx, func() (err error) {
		header, err = DoHeader(ctx, method, base, path, q, in, out)
		return err
	})
	return header, err
}

// checkShardHeaders fails t unless header names shard as the one whose
// log index (the body's) is of.
func checkShardHeaders(t *testing.T, what string, header http.Header, shard int, index uint64) {
	t.Helper()
	if got := header.Get(api.HeaderShard); got != strconv.Itoa(shard) {
		t.Errorf("%s: %s %q, want %d", what, api.HeaderShard, got, shard)
	}
	if got := header.Get(api.HeaderIndex); got != strconv.FormatUint(index, 10) {
		t.Errorf("%s: %s %q, want the body's index %d", what, api.HeaderIndex, got, index)
	}
	if got := header.Get(api.HeaderShards); got != strconv.Itoa(wiringShards) {
		t.Errorf("%s: %s %q, want %d", what, api.HeaderShards, got, wiringShards)
	}
}

// TestShardsRepliesNameTheirShard: on a cluster of 4 shards, the replies
// of locks, elections, transactions, multi-reads and sessions name the
// shard the server itself places them in (ChildShardOf of the queue's
// directory, ShardOf of a node), in the header and, for locks and
// elections, in the body; a close gives every shard an index at which its
// cleanup is applied, so a stale read elsewhere waiting for them finds the
// session's nodes gone.
func TestShardsRepliesNameTheirShard(t *testing.T) {
	c := newShardedCluster(t)
	ctx := ctxT(t, 90*time.Second)
	srv := c.Nodes[0].Server
	var sess api.Session
	header, err := doHeader(ctx, http.MethodPost, c.URL(0), "/v1/session/create", nil, api.SessionCreateRequest{TimeoutMs: 20000}, &sess)
	if err != nil {
		t.Fatal(err)
	}
	checkShardHeaders(t, "session create", header, 0, sess.Index)

	t.Run("locks", func(t *testing.T) {
		for shard, name := range namesInEveryShard("/locks/", "reply-%d") {
			want := srv.ChildShardOf("/locks/" + name)
			if want != shard {
				t.Fatalf("lock %s: the server places its queue in shard %d, placement in %d", name, want, shard)
			}
			base := c.URL(shard % 3)
			var lock api.Lock
			header, err := doHeader(ctx, http.MethodPost, base, "/v1/lock/acquire", nil, api.LockRequest{Name: name, SessionID: sess.SessionID, WaitMs: 10000}, &lock)
			if err != nil || !lock.Held {
				t.Fatalf("acquire %s: %+v, %v", name, lock, err)
			}
			checkShardHeaders(t, "acquire "+name, header, want, lock.Index)
			if lock.Shard != want {
				t.Errorf("acquire %s: body shard %d, want %d", name, lock.Shard, want)
			}
			var st api.LockState
			header, err = doHeader(ctx, http.MethodGet, c.URL((shard+1)%3), "/v1/lock/"+name, nil, nil, &st)
			if err != nil {
				t.Fatalf("state of %s: %v", name, err)
			}
			checkShardHeaders(t, "state of "+name, header, want, st.Index)
			if st.Shard != want || st.Holder == nil || st.Holder.FencingToken != lock.FencingToken {
				t.Errorf("state of %s: %+v, want shard %d and the holder of token %d", name, st, want, lock.FencingToken)
			}
			var released api.Released
			header, err = doHeader(ctx, http.MethodPost, base, "/v1/lock/release", nil, api.LockRequest{Name: name, SessionID: sess.SessionID}, &released)
			if err != nil {
				t.Fatalf("release %s: %v", name, err)
			}
			checkShardHeaders(t, "release "+name, header, want, released.Index)
			if released.Shard != want {
				t.Errorf("release %s: body shard %d, want %d", name, released.Shard, want)
			}
		}
	})

	t.Run("elections", func(t *testing.T) {
		for shard, role := range namesInEveryShard("/elections/", "reply-%d") {
			want := srv.ChildShardOf("/elections/" + role)
			base := c.URL(shard % 3)
			var cand api.Candidacy
			header, err := doHeader(ctx, http.MethodPost, base, "/v1/election/join", nil, api.ElectionRequest{Role: role, SessionID: sess.SessionID, Value: "v"}, &cand)
			if err != nil || !cand.IsLeader {
				t.Fatalf("join %s: %+v, %v", role, cand, err)
			}
			checkShardHeaders(t, "join "+role, header, want, cand.Index)
			if cand.Shard != want {
				t.Errorf("join %s: body shard %d, want %d", role, cand.Shard, want)
			}
			var st api.ElectionState
			header, err = doHeader(ctx, http.MethodGet, c.URL((shard+1)%3), "/v1/election/"+role, nil, nil, &st)
			if err != nil {
				t.Fatalf("state of %s: %v", role, err)
			}
			checkShardHeaders(t, "state of "+role, header, want, st.Index)
			if st.Shard != want {
				t.Errorf("state of %s: body shard %d, want %d", role, st.Shard, want)
			}
			var resigned api.Resigned
			header, err = doHeader(ctx, http.MethodPost, base, "/v1/election/resign", nil, api.ElectionRequest{Role: role, SessionID: sess.SessionID}, &resigned)
			if err != nil {
				t.Fatalf("resign %s: %v", role, err)
			}
			checkShardHeaders(t, "resign "+role, header, want, resigned.Index)
			if resigned.Shard != want {
				t.Errorf("resign %s: body shard %d, want %d", role, resigned.Shard, want)
			}
		}
	})

	ephemerals := map[int]api.Node{}
	t.Run("txn and multi-read", func(t *testing.T) {
		value := "1"
		for shard, dir := range namesInEveryShard("/reply/", "d%d") {
			p := "/reply/" + dir + "/x"
			want := srv.ShardOf(p)
			if want != shard {
				t.Fatalf("%s: the server places it in shard %d, placement in %d", p, want, shard)
			}
			if _, err := put(ctx, c.URL(0), p, "0", ""); err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
			var txn api.Txn
			header, err := doHeader(ctx, http.MethodPost, c.URL(shard%3), "/v1/txn", nil, api.TxnRequest{Ops: []api.TxnOp{{Op: "set", Path: p, Value: &value}}}, &txn)
			if err != nil {
				t.Fatalf("txn on %s: %v", p, err)
			}
			checkShardHeaders(t, "txn on "+p, header, want, txn.Index)
			var read api.ReadResults
			header, err = doHeader(ctx, http.MethodPost, c.URL((shard+1)%3), "/v1/read", nil, api.ReadRequest{Reads: []api.ReadOp{{Path: p}}}, &read)
			if err != nil {
				t.Fatalf("multi-read of %s: %v", p, err)
			}
			checkShardHeaders(t, "multi-read of "+p, header, want, read.Index)
			e := "/reply/" + dir + "/e"
			node, err := sessionPut(ctx, c.URL(0), e, "", SessionWrite{SessionID: sess.SessionID, Ephemeral: true})
			if err != nil {
				t.Fatalf("ephemeral %s: %v", e, err)
			}
			ephemerals[shard] = node
		}
	})

	t.Run("txn spanning shards", func(t *testing.T) {
		names := namesInEveryShard("/span/", "d%d")
		a, b := "/span/"+names[1]+"/x", "/span/"+names[2]+"/x"
		value := "1"
		err := Do(ctx, http.MethodPost, c.URL(0), "/v1/txn", nil, api.TxnRequest{Ops: []api.TxnOp{
			{Op: "create", Path: a, Value: &value}, {Op: "create", Path: b, Value: &value}}}, nil)
		want := fmt.Sprintf("transaction spans shards %d and %d (%q is in shard %d, %q in shard %d)",
			srv.ShardOf(a), srv.ShardOf(b), a, srv.ShardOf(a), b, srv.ShardOf(b))
		if api.CodeOf(err) != api.CodeInvalidArgument || !strings.HasPrefix(err.(*api.Error).Message, want) {
			t.Errorf("txn over %s and %s: %v, want invalid_argument %q", a, b, err, want)
		}
	})

	t.Run("session close", func(t *testing.T) {
		if len(ephemerals) != wiringShards {
			t.Skip("the ephemeral nodes were not made")
		}
		var closed api.Closed
		header, err := doHeader(ctx, http.MethodPost, c.URL(1), "/v1/session/close", nil, api.SessionRequest{SessionID: sess.SessionID}, &closed)
		if err != nil {
			t.Fatalf("close: %v", err)
		}
		checkShardHeaders(t, "close", header, 0, closed.Index)
		if len(closed.Indexes) != wiringShards || closed.Indexes[0] != closed.Index {
			t.Fatalf("close: indexes %v, want one per shard, shard 0's the close's %d", closed.Indexes, closed.Index)
		}
		var pairs []string
		for shard, node := range ephemerals {
			if closed.Indexes[shard] <= node.CreatedIndex {
				t.Errorf("close: shard %d's index %d is not past the ephemeral %s made at %d", shard, closed.Indexes[shard], node.Path, node.CreatedIndex)
			}
			pairs = append(pairs, fmt.Sprintf("%d:%d", shard, closed.Indexes[shard]))
		}
		sort.Strings(pairs)
		q := url.Values{"consistency": {"stale"}, "min_index": {strings.Join(pairs, ",")}}
		for _, node := range ephemerals {
			if err := Do(ctx, http.MethodGet, c.URL(2), "/v1/kv"+node.Path, q, nil, nil); api.CodeOf(err) != api.CodeNotFound {
				t.Errorf("stale read of %s at the close's indexes: %v, want not_found", node.Path, err)
			}
		}
	})
}

// TestOneShardRepliesNameNoShard: with one shard the replies carry neither
// shard header, and the bodies no shard field (status lists its one shard
// as it always did), as before sharding.
func TestOneShardRepliesNameNoShard(t *testing.T) {
	c := New(t, 1, Options{})
	c.WaitLeader(10 * time.Second)
	ctx := ctxT(t, 30*time.Second)
	base := c.URL(0)
	var sess api.Session
	if err := Do(ctx, http.MethodPost, base, "/v1/session/create", nil, api.SessionCreateRequest{}, &sess); err != nil {
		t.Fatal(err)
	}
	value := "v"
	if _, err := Put(ctx, base, "/one", "0", ""); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, method, path string
		in                 any
	}{
		{"lock acquire", http.MethodPost, "/v1/lock/acquire", api.LockRequest{Name: "l", SessionID: sess.SessionID}},
		{"lock state", http.MethodGet, "/v1/lock/l", nil},
		{"lock release", http.MethodPost, "/v1/lock/release", api.LockRequest{Name: "l", SessionID: sess.SessionID}},
		{"election join", http.MethodPost, "/v1/election/join", api.ElectionRequest{Role: "r", SessionID: sess.SessionID}},
		{"election state", http.MethodGet, "/v1/election/r", nil},
		{"txn", http.MethodPost, "/v1/txn", api.TxnRequest{Ops: []api.TxnOp{{Op: "set", Path: "/one", Value: &value}}}},
		{"multi-read", http.MethodPost, "/v1/read", api.ReadRequest{Reads: []api.ReadOp{{Path: "/one"}}}},
		{"get", http.MethodGet, "/v1/kv/one", nil},
		{"status", http.MethodGet, "/v1/status", nil},
		{"session close", http.MethodPost, "/v1/session/close", api.SessionRequest{SessionID: sess.SessionID}},
	} {
		var body json.RawMessage
		header, err := DoHeader(ctx, tt.method, base, tt.path, nil, tt.in, &body)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if header.Get(api.HeaderShard) != "" || header.Get(api.HeaderShards) != "" {
			t.Errorf("%s: shard headers %q/%q with one shard", tt.name, header.Get(api.HeaderShard), header.Get(api.HeaderShards))
		}
		if tt.path != "/v1/status" && (strings.Contains(string(body), `"shard"`) || strings.Contains(string(body), `"indexes"`)) {
			t.Errorf("%s: body %s names a shard with one shard", tt.name, body)
		}
	}
}

// switchTransport sends every request to the client address target holds,
// whatever endpoint the client chose: the test decides which member
// answers.
type switchTransport struct {
	target atomic.Pointer[string]
	next   http.RoundTripper
}

func (s *switchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u, err := url.Parse(*s.target.Load())
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
	return s.next.RoundTrip(r)
}

// TestShardsClientReadsItsLockElsewhere: the Go client records the
// position of a lock acquired through one member (the lock's shard, named
// by the reply), so its stale read of the lock's queue node through a
// member that was down meanwhile waits for it instead of answering from
// before the acquire; likewise a session closed through one member has its
// ephemeral nodes gone in every shard for a read through another. The
// member read through is restarted with the messages to it delayed, and
// has applied everything the client saw before each step: it lags behind
// that step's writes only, so only a read waiting for the positions the
// step's replies gave sees them.
//
// The cluster is Steady: with the default 100ms election timeout a loaded
// machine deposes leaders by accident, and a write (the session's create,
// which the client does not resend) can find no leader within the request
// timeout.
func TestShardsClientReadsItsLockElsewhere(t *testing.T) {
	c := newShardedClusterWith(t, Steady(Options{}))
	ctx := ctxT(t, 120*time.Second)
	const lagging = 2
	route := &switchTransport{next: client.NewTransport(client.Config{})}
	at := func(i int) { u := c.URL(i); route.target.Store(&u) }
	at(0)
	cl, err := client.New(client.Config{Endpoints: []string{c.URL(0)}, Transport: route})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sess, err := cl.NewSession(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	dirs := namesInEveryShard("/mine/", "d%d")
	// Shard 0's last: the close's own entry deletes its node, and a read
	// waiting for it would let the member catch up in the other shards too.
	var paths []string
	for shard := range wiringShards {
		paths = append(paths, "/mine/"+dirs[(shard+1)%wiringShards]+"/e")
	}
	putEphemerals(ctx, t, cl, sess, paths)
	restartLagging(t, c, lagging)
	var locks []*api.Lock
	for shard, name := range namesInEveryShard("/locks/", "mine-%d") {
		lock, err := sess.AcquireLock(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatalf("acquire %s (shard %d): %v", name, shard, err)
		}
		locks = append(locks, lock)
	}
	at(lagging)
	for _, lock := range locks {
		node, err := cl.Get(ctx, lock.Path, client.Stale())
		if err != nil {
			t.Fatalf("stale read of the lock node %s (shard %d) through the lagging member: %v", lock.Path, lock.Shard, err)
		}
		if node.CreatedIndex != lock.FencingToken {
			t.Errorf("lock node %s: created at %d, want its token %d", lock.Path, node.CreatedIndex, lock.FencingToken)
		}
	}
	at(0)
	caughtUp(t, c, lagging)
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	at(lagging)
	for _, p := range paths {
		if _, err := cl.Get(ctx, p, client.Stale()); api.CodeOf(err) != api.CodeNotFound {
			t.Errorf("stale read of %s through the lagging member, after the close: %v, want not_found", p, err)
		}
	}
	c.Net.Heal()
}

// putEphemerals creates an ephemeral node of sess at each path, in order.
func putEphemerals(ctx context.Context, t *testing.T, cl *client.Client, sess *client.Session, paths []string) {
	t.Helper()
	for _, p := range paths {
		if _, err := cl.Put(ctx, p, "x", client.Ephemeral(), client.WithSession(sess)); err != nil {
			t.Fatalf("ephemeral %s: %v", p, err)
		}
	}
}

// restartLagging restarts member lagging (so that it leads no shard) with
// every message to it slowed down (slowDown), and waits until it has
// caught up with what member 0 applied.
func restartLagging(t *testing.T, c *Cluster, lagging int) {
	t.Helper()
	c.Stop(lagging)
	slowDown(c, lagging)
	c.Restart(lagging)
	caughtUp(t, c, lagging)
}

// caughtUp waits until member i applied, in every shard, what member 0 has
// applied now: whatever the client saw before, i has too.
func caughtUp(t *testing.T, c *Cluster, i int) {
	t.Helper()
	want := c.Status(0).Shards
	if !waitFor(20*time.Second, func() bool {
		got := c.Status(i).Shards
		for k := range want {
			if got[k].AppliedIndex < want[k].AppliedIndex {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("member %d did not catch up with %+v: %+v", i, want, c.Status(i).Shards)
	}
}

// slowDown delays every message to member i by more than a stale read of
// the test takes: i applies a write well after it is acknowledged, so a
// read through it sees the write at once only if it waits for a position.
// Member i is to be restarted after it, so that it leads no shard.
func slowDown(c *Cluster, i int) {
	for _, other := range c.Others(i) {
		c.Net.SetDelay(c.Nodes[other].ID, c.Nodes[i].ID, 300*time.Millisecond)
	}
}

// loseReply runs the first request to path through next, then throws its
// reply away and reports a transport error instead: the server did the
// request, the client does not know it.
type loseReply struct {
	path string
	lost atomic.Bool
	next http.RoundTripper
}

func (l *loseReply) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err != nil || r.URL.Path != l.path || !l.lost.CompareAndSwap(false, true) {
		return resp, err
	}
	resp.Body.Close()
	return nil, fmt.Errorf("the reply of %s was lost", l.path)
}

// TestShardsClientCloseRetriedFindsNodesGone: a close whose reply is lost
// (or that answered 503 while the cleanup in the other shards was not yet
// confirmed) is sent again by the Go client and answered 410: the session
// is no longer live. That 410 carries every shard's position of the
// cleanup, as the close's own reply would have, so a stale read through a
// lagging member still finds the session's ephemeral nodes gone.
func TestShardsClientCloseRetriedFindsNodesGone(t *testing.T) {
	c := newShardedClusterWith(t, Steady(Options{}))
	ctx := ctxT(t, 120*time.Second)
	const lagging = 2
	route := &switchTransport{next: client.NewTransport(client.Config{})}
	at := func(i int) { u := c.URL(i); route.target.Store(&u) }
	at(0)
	lossy := &loseReply{path: "/v1/session/close", next: route}
	cl, err := client.New(client.Config{Endpoints: []string{c.URL(0)}, Transport: lossy})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sess, err := cl.NewSession(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, dir := range namesInEveryShard("/gone/", "d%d") {
		paths = append(paths, "/gone/"+dir+"/e")
	}
	putEphemerals(ctx, t, cl, sess, paths)
	restartLagging(t, c, lagging)
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !lossy.lost.Load() {
		t.Fatal("the close's first reply was not lost: the test did not retry it")
	}
	at(lagging)
	for _, p := range paths {
		if _, err := cl.Get(ctx, p, client.Stale()); api.CodeOf(err) != api.CodeNotFound {
			t.Errorf("stale read of %s through the lagging member, after a retried close: %v, want not_found", p, err)
		}
	}
	c.Net.Heal()
}
