package client

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkCacheGet measures a read served from a Cache's memory (1,000
// keys loaded from one real in-process member):
// go test -run XXX -bench CacheGet -cpu 1 ./client
func BenchmarkCacheGet(b *testing.B) {
	const keys = 1000
	c, err := New(Config{Endpoints: newClusterB(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths := make([]string, keys)
	for i := range paths {
		paths[i] = fmt.Sprintf("/config/key-%06d", i)
		if _, err := c.Put(ctx, paths[i], strings.Repeat("v", 32)); err != nil {
			b.Fatal(err)
		}
	}
	s, err := c.NewSession(ctx, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	cache, err := NewCache(ctx, s, "/config")
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := cache.Get(paths[i%keys]); !ok {
			b.Fatalf("%s not cached", paths[i%keys])
		}
	}
}

// BenchmarkCacheBytesPerKey measures the heap a Cache holds per cached
// node: 100,000 nodes of a 19-byte path and a 32-byte value, stored as a
// load stores them (strings allocated apart, as decoding a reply does),
// heap in use after a GC before and after:
// go test -run XXX -bench CacheBytesPerKey -benchtime 1x ./client
func BenchmarkCacheBytesPerKey(b *testing.B) {
	const keys = 100_000
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cache := &Cache{nodes: map[string]CachedNode{}}
		read := make(map[string]CachedNode, keys)
		for i := range keys {
			read[fmt.Sprintf("/config/key-%07d", i)] = CachedNode{Value: strings.Repeat("v", 31) + string(rune('a'+i%26)), Version: 1,
				CreatedIndex: uint64(i), ModifiedIndex: uint64(i)}
		}
		cache.replace(read)
		read = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(cache)
	}
}
