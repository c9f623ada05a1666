package cache_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the random writes (0: from LATCH_SEED or the clock)")

const (
	prefix = "/cache"
	keys   = 10_000
)

func keyPath(k int) string { return fmt.Sprintf("%s/k%05d", prefix, k) }

// parallel runs fn(0..n-1) on 8 goroutines.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var workers sync.WaitGroup
	for range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	workers.Wait()
}

// serverState reads the prefix and every key linearizably.
func serverState(t *testing.T, c *client.Client) map[string]client.CachedNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := c.Children(ctx, prefix)
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	paths := append([]string{prefix}, make([]string, 0, len(list.Children))...)
	for _, name := range list.Children {
		paths = append(paths, prefix+"/"+name)
	}
	nodes := make([]*api.Node, len(paths))
	errs := make([]error, len(paths))
	parallel(len(paths), func(i int) { nodes[i], errs[i] = c.Get(ctx, paths[i]) })
	out := map[string]client.CachedNode{}
	for i, node := range nodes {
		if errs[i] != nil {
			t.Fatalf("read %s: %v", paths[i], errs[i])
		}
		out[paths[i]] = client.CachedNode{Value: node.Value, Version: node.Version,
			CreatedIndex: node.CreatedIndex, ModifiedIndex: node.ModifiedIndex}
	}
	return out
}

// requireEqual waits until the cache holds exactly the server's state.
func requireEqual(t *testing.T, cache *client.Cache, c *client.Client, when string) {
	t.Helper()
	want := serverState(t, c)
	if len(want) != keys+1 {
		t.Fatalf("%s: the server holds %d nodes under %s, want %d", when, len(want), prefix, keys+1)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !maps.Equal(cache.Nodes(), want) {
		if err := cache.Err(); err != nil {
			t.Fatalf("%s: the cache stopped following: %v", when, err)
		}
		if time.Now().After(deadline) {
			got, differ := cache.Nodes(), 0
			for path, node := range want {
				if got[path] != node {
					if differ++; differ <= 5 {
						t.Errorf("%s: cache %s = %+v, server %+v", when, path, got[path], node)
					}
				}
			}
			t.Fatalf("%s: %d of %d nodes differ from the server's after 2 minutes", when, differ, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writer rewrites random keys until ctx ends, counting acknowledged writes.
func writer(ctx context.Context, c *client.Client, rng *rand.Rand, acked *atomic.Int64) {
	for n := 0; ctx.Err() == nil; n++ {
		if _, err := c.Put(ctx, keyPath(rng.IntN(keys)), fmt.Sprintf("w-%d-%d", rng.Uint32(), n)); err == nil {
			acked.Add(1)
		}
	}
}

// monotonicReader reads keys from the cache until stop, reporting the
// first key it saw go back.
func monotonicReader(cache *client.Cache, stop <-chan struct{}, violation chan<- string) {
	seen := make([]uint64, keys)
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		for k := range keys {
			node, _ := cache.Get(keyPath(k))
			if node.ModifiedIndex < seen[k] {
				select {
				case violation <- fmt.Sprintf("%s went back from index %d to %d", keyPath(k), seen[k], node.ModifiedIndex):
				default:
				}
			}
			seen[k] = node.ModifiedIndex
		}
		select { // one pass per 20 ms at most: the machine is shared
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestCacheOf10000KeysThroughKills(t *testing.T) {
	seed := testseed.Pick(t, *seedFlag, "LATCH_SEED")
	cluster := proccluster.Start(t, proccluster.Options{SnapshotCount: 5000})
	cluster.WaitLeader(30 * time.Second)
	c, err := client.New(client.Config{Endpoints: cluster.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	parallel(keys, func(k int) {
		if _, err := c.Put(ctx, keyPath(k), "initial"); err != nil {
			t.Errorf("put %s: %v", keyPath(k), err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	session, err := c.NewSession(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(context.Background())
	cache, err := client.NewCache(ctx, session, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	requireEqual(t, cache, c, "after the first load")

	stopReading := make(chan struct{})
	violation := make(chan string, 1)
	go monotonicReader(cache, stopReading, violation)
	defer close(stopReading)
	for victim := range cluster.Members {
		var acked atomic.Int64
		writeCtx, stopWriting := context.WithCancel(ctx)
		var writers sync.WaitGroup
		for w := range 2 {
			writers.Add(1)
			rng := rand.New(rand.NewPCG(seed, uint64(victim*2+w)))
			go func() { defer writers.Done(); writer(writeCtx, c, rng, &acked) }()
		}
		waitAcked(t, &acked, 100, "before the kill")
		cluster.Kill(victim)
		waitAcked(t, &acked, 300, "after the kill")
		if err := cluster.Restart(victim); err != nil {
			t.Fatal(err)
		}
		cluster.WaitLeader(30 * time.Second)
		waitAcked(t, &acked, 400, "after the restart")
		stopWriting()
		writers.Wait()
		requireEqual(t, cache, c, fmt.Sprintf("after member %d was killed and restarted", victim+1))
		t.Logf("member %d killed and restarted: %d writes acknowledged meanwhile, cache equal", victim+1, acked.Load())
	}
	select {
	case v := <-violation:
		t.Fatalf("the cache was not monotonic: %s", v)
	default:
	}
}

// waitAcked waits until acked reaches n.
func waitAcked(t *testing.T, acked *atomic.Int64, n int64, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for acked.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d writes acknowledged in 2 minutes, want %d", when, acked.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
