package client

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// serverState reads every node under prefix linearizably, as the cache
// should hold it.
func serverState(t *testing.T, c *Client, prefix string) map[string]CachedNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]CachedNode{}
	level := []string{prefix}
	for len(level) > 0 {
		var next []string
		for _, path := range level {
			node, err := c.Get(ctx, path)
			if api.CodeOf(err) == api.CodeNotFound {
				continue
			}
			if err != nil {
				t.Fatalf("read %s: %v", path, err)
			}
			out[path] = cachedNode(node)
			if node.ChildrenCount > 0 {
				list, err := c.Children(ctx, path)
				if err != nil {
					t.Fatalf("list %s: %v", path, err)
				}
				for _, name := range list.Children {
					next = append(next, childPrefix(path)+name)
				}
			}
		}
		level = next
	}
	return out
}

// waitCacheEquals waits until the cache holds exactly want.
func waitCacheEquals(t *testing.T, cache *Cache, want map[string]CachedNode) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !maps.Equal(cache.Nodes(), want) {
		if time.Now().After(deadline) {
			got := cache.Nodes()
			for path, node := range want {
				if got[path] != node {
					t.Errorf("cache holds %s = %+v, the server %+v", path, got[path], node)
				}
			}
			for path := range got {
				if _, ok := want[path]; !ok {
					t.Errorf("cache holds %s, which the server does not", path)
				}
			}
			t.Fatalf("the cache (%d nodes) did not reach the server's state (%d nodes) in 30s; cache error %v",
				len(got), len(want), cache.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestCache(t *testing.T, env *watchEnv, prefix string, opts ...CacheOption) *Cache {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache, err := NewCache(ctx, env.session, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	return cache
}

func TestCacheLoadsAndFollowsItsPrefix(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.put(t, "/cfg/a", "1")
	env.put(t, "/cfg/dir/b", "2")
	env.put(t, "/cfgx", "not under /cfg")
	cache := newTestCache(t, env, "/cfg")
	if got := cache.Nodes(); len(got) != 4 || got["/cfg/a"].Value != "1" || got["/cfg/dir/b"].Value != "2" {
		t.Fatalf("first load: %+v, want /cfg, /cfg/a, /cfg/dir, /cfg/dir/b", got)
	}
	if _, ok := cache.Get("/cfgx"); ok {
		t.Fatal("the cache holds /cfgx, which is not under /cfg")
	}
	env.put(t, "/cfg/a", "1b")
	env.put(t, "/cfg/new/deep", "3")
	if _, err := env.client.Delete(context.Background(), "/cfg/dir", Recursive()); err != nil {
		t.Fatal(err)
	}
	waitCacheEquals(t, cache, serverState(t, env.client, "/cfg"))
	if node, _ := cache.Get("/cfg/a"); node.Value != "1b" || node.Version != 2 {
		t.Fatalf("/cfg/a = %+v, want 1b at version 2", node)
	}
	if _, ok := cache.Get("/cfg/dir/b"); ok {
		t.Fatal("/cfg/dir/b is still cached after its parent was deleted recursively")
	}
}

func TestCacheGetConsistentReadsTheServer(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.put(t, "/c/k", "0")
	cache := newTestCache(t, env, "/c")
	ctx := context.Background()
	for i := 1; i <= 20; i++ {
		written := env.put(t, "/c/k", strconv.Itoa(i))
		node, ok, err := cache.GetConsistent(ctx, "/c/k")
		if err != nil || !ok || node.ModifiedIndex < written.ModifiedIndex {
			t.Fatalf("GetConsistent right after write %d (index %d): %+v, %v, %v", i, written.ModifiedIndex, node, ok, err)
		}
		if cached, _ := cache.Get("/c/k"); cached.ModifiedIndex < node.ModifiedIndex {
			t.Fatalf("Get after GetConsistent returned %+v, older than %+v", cached, node)
		}
	}
	if _, err := env.client.Delete(ctx, "/c/k"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cache.GetConsistent(ctx, "/c/k"); err != nil || ok {
		t.Fatalf("GetConsistent after the delete: %v, %v; want not found", ok, err)
	}
	if _, ok := cache.Get("/c/k"); ok {
		t.Fatal("Get after GetConsistent saw the delete still returns the node")
	}
	if _, _, err := cache.GetConsistent(ctx, "/elsewhere"); api.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("GetConsistent outside the prefix: %v, want invalid_argument", err)
	}
}

// TestCacheIsMonotonicThroughFailover: while keys are rewritten with
// growing values and the member holding the session's event stream is
// crashed, readers never see a key go back, nor, once the cache announced a
// change, a state older than it; after the writes the cache equals the
// server.
func TestCacheIsMonotonicThroughFailover(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 3)
	const keys = 20
	for k := range keys {
		env.put(t, fmt.Sprintf("/m/k%02d", k), "0")
	}
	var announced sync.Map                    // path -> *atomic.Uint64: the highest ModifiedIndex OnChange announced
	var changed atomic.Pointer[chan struct{}] // closed and replaced at every announced change
	first := make(chan struct{})
	changed.Store(&first)
	announce := func(ch CacheChange) {
		v, _ := announced.LoadOrStore(ch.Path, new(atomic.Uint64))
		highest := v.(*atomic.Uint64)
		if ch.Node.ModifiedIndex > highest.Load() {
			highest.Store(ch.Node.ModifiedIndex)
		}
		next := make(chan struct{})
		close(*changed.Swap(&next))
	}
	cache := newTestCache(t, env, "/m", OnCacheChange(announce))

	stop := make(chan struct{})
	var readers sync.WaitGroup
	violations := make(chan string, 10)
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			seen := map[string]uint64{}
			for {
				select { // a pass of reads after every announced change
				case <-stop:
					return
				case <-*changed.Load():
				}
				for k := range keys {
					path := fmt.Sprintf("/m/k%02d", k)
					var floor uint64
					if v, ok := announced.Load(path); ok {
						floor = v.(*atomic.Uint64).Load()
					}
					node, _ := cache.Get(path)
					if node.ModifiedIndex < max(floor, seen[path]) {
						select {
						case violations <- fmt.Sprintf("%s at %d after %d was seen and %d announced", path, node.ModifiedIndex, seen[path], floor):
						default:
						}
					}
					seen[path] = node.ModifiedIndex
				}
			}
		}()
	}
	write := func(round int) {
		for k := range keys {
			env.put(t, fmt.Sprintf("/m/k%02d", k), strconv.Itoa(round))
		}
	}
	write(1)
	// Crash the members one after another, restarting each, so the stream
	// moves at least once whichever member held it. Stopping the proxy
	// first drops the member's connections, as the kernel does for a killed
	// process.
	for i := range 3 {
		env.cluster.Proxy(i).Stop()
		env.cluster.Real.Crash(i)
		write(2 + 2*i)
		env.cluster.Real.Restart(i)
		if err := env.cluster.Proxy(i).Start(); err != nil {
			t.Fatal(err)
		}
		env.cluster.Real.WaitLeader(10 * time.Second)
		write(3 + 2*i)
	}
	waitCacheEquals(t, cache, serverState(t, env.client, "/m"))
	close(stop)
	readers.Wait()
	select {
	case v := <-violations:
		t.Fatalf("a reader went back: %s", v)
	default:
	}
	if node, _ := cache.Get("/m/k00"); node.Value != "7" {
		t.Fatalf("/m/k00 = %+v, want the last round's value 7", node)
	}
}

// TestCacheResumeAfterReconnectLosesNothing: streams cut again and again
// while keys change; every change reaches the cache (a lost one would leave
// a key at an old value, since each key is written once per round).
func TestCacheResumeAfterReconnectLosesNothing(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 2)
	env.put(t, "/r/start", "")
	var changes atomic.Int64
	cache := newTestCache(t, env, "/r", OnCacheChange(func(CacheChange) { changes.Add(1) }))
	for round := range 5 {
		env.cluster.CutStreams("test cuts the stream")
		for k := range 30 {
			env.put(t, fmt.Sprintf("/r/k%02d", k), strconv.Itoa(round))
		}
		if round%2 == 1 {
			if _, err := env.client.Delete(context.Background(), fmt.Sprintf("/r/k%02d", round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitCacheEquals(t, cache, serverState(t, env.client, "/r"))
	if changes.Load() < 30 {
		t.Fatalf("OnChange announced %d changes, want at least the 30 keys made", changes.Load())
	}
}

func TestCacheStopsFollowingWhenItsSessionEnds(t *testing.T) {
	t.Parallel()
	env := newWatchEnv(t, 1)
	env.put(t, "/s/k", "1")
	cache := newTestCache(t, env, "/s")
	env.cluster.Expire(env.session.ID())
	waitFor(t, "the cache to report its session's end", func() bool { return cache.Err() != nil })
	if node, ok := cache.Get("/s/k"); !ok || node.Value != "1" {
		t.Fatalf("after the session's end Get returns %+v, %v; want the last state", node, ok)
	}
	if _, _, err := cache.GetConsistent(context.Background(), "/s/k"); err == nil {
		t.Fatal("GetConsistent on a cache that stopped following succeeded")
	}
	cache.Close()
	if err := cache.Err(); err == ErrCacheClosed {
		t.Fatalf("Close replaced the reason the cache stopped (%v)", err)
	}
}
