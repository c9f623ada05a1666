package zkserver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// What a ZooKeeper request costs the member it arrives at and the client
// together, per operation, over real loopback TCP: one in-process member
// with its ZooKeeper listener, one go-zookeeper connection with 64 requests
// in flight (b.SetParallelism over the processors). Allocations are the
// stable figure on a shared machine; time includes the WAL's fsyncs and
// the system calls.
//
//	go test -run '^$' -bench 'BenchmarkZK' -benchmem ./internal/zkserver

func benchmarkZK(b *testing.B, op func(c *zk.Conn, key string) error) {
	c := startZK(b, 1, Config{})
	conn, events, err := zk.Connect(c.addrs, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		b.Fatalf("zk.Connect: %v", err)
	}
	defer conn.Close()
	for deadline := time.After(20 * time.Second); ; {
		select {
		case ev := <-events:
			if ev.State != zk.StateHasSession {
				continue
			}
		case <-deadline:
			b.Fatalf("no session within 20s (state %v)", conn.State())
		}
		break
	}
	const keys = 1000
	value := []byte(strings.Repeat("v", 256))
	if _, err := conn.Create("/bench", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	for i := range keys {
		if _, err := conn.Create(fmt.Sprintf("/bench/k%04d", i), value, 0, zk.WorldACL(zk.PermAll)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(32) // 64 requests in flight on two processors
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := op(conn, fmt.Sprintf("/bench/k%04d", i%keys)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkZKSet(b *testing.B) {
	value := []byte(strings.Repeat("w", 256))
	benchmarkZK(b, func(c *zk.Conn, key string) error {
		_, err := c.Set(key, value, -1)
		return err
	})
}

func BenchmarkZKGet(b *testing.B) {
	benchmarkZK(b, func(c *zk.Conn, key string) error {
		_, _, err := c.Get(key)
		return err
	})
}
