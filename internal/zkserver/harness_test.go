package zkserver

import (
	"cmp"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// zkCluster is an in-process latch cluster with a ZooKeeper listener on
// each member, on loopback.
type zkCluster struct {
	*testcluster.Cluster
	addrs     []string
	listeners []*Listener
}

// startZK starts n in-process members and a listener on each.
func startZK(t testing.TB, n int, cfg Config) *zkCluster {
	t.Helper()
	return startZKWith(t, n, cfg, testcluster.Options{}, nil)
}

// startZKWith is startZK with cluster options (session bounds default to
// 1s-30s) and, if wrap is set, each listener's net.Listener wrapped (TLS).
func startZKWith(t testing.TB, n int, cfg Config, opts testcluster.Options, wrap func(net.Listener) net.Listener) *zkCluster {
	t.Helper()
	opts.MinSessionTTL = cmp.Or(opts.MinSessionTTL, time.Second)
	opts.MaxSessionTTL = cmp.Or(opts.MaxSessionTTL, 30*time.Second)
	c := &zkCluster{Cluster: testcluster.New(t, n, opts)}
	if opts.Shards > 1 {
		// The balancer moves leaders at first, and a write pending at a
		// leader change ends its ZooKeeper connection (as there): start
		// once the leaderships stay put.
		c.WaitBalanced(60 * time.Second)
	}
	for i := range c.Nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		if wrap != nil {
			ln = wrap(ln)
		}
		cfg := cfg
		cfg.Addr = ln.Addr().String()
		l := New(c.Nodes[i].Server, cfg)
		go l.Serve(ln)
		c.addrs = append(c.addrs, ln.Addr().String())
		c.listeners = append(c.listeners, l)
		t.Cleanup(func() { l.Close() })
	}
	return c
}

// connect opens a go-zookeeper client to the given members and waits for
// its session.
func connect(t *testing.T, addrs []string, timeout time.Duration) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect(addrs, timeout, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk.Connect: %v", err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, events
			}
		case <-deadline:
			t.Fatalf("no session from %v within 20s (state %v)", addrs, conn.State())
		}
	}
}

// waitEvent returns the next event on ch, failing the test after 10s.
func waitEvent(t *testing.T, ch <-chan zk.Event, what string) zk.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event within 10s", what)
	}
	return zk.Event{}
}
