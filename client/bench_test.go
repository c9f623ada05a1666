package client

import (
	"context"
	"testing"
)

// BenchmarkGet measures a read through the client (against one real
// in-process member behind a proxy, so the member's cost is in it too):
// go test -bench . -benchmem ./client
func BenchmarkGet(b *testing.B) {
	for _, stale := range []bool{false, true} {
		name := "linearizable"
		var opts []ReadOption
		if stale {
			name, opts = "stale", []ReadOption{Stale()}
		}
		b.Run(name, func(b *testing.B) {
			cluster := newClusterB(b)
			c, err := New(Config{Endpoints: cluster})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Put(ctx, "/k", "value"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Get(ctx, "/k", opts...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkPut(b *testing.B) {
	c, err := New(Config{Endpoints: newClusterB(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	value := string(make([]byte, 256))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Put(context.Background(), "/k", value); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
