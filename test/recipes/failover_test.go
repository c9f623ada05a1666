package recipes_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
)

// failoverSessionTimeout is the session timeout of the client that loses
// its server: above the time to detect the dead server, fail over and, when
// it was the raft leader, elect another.
const failoverSessionTimeout = 4 * time.Second

// TestClientFailover gives one client a session that holds a lock and has a
// persistent watch (and the lock's own node watch), all on one server X: a
// transport that refuses every other server while the test sets up pins the
// client there. It then lets the client reach every server and kill -9s X.
// A heartbeat is then answered by another server, and for a whole session
// timeout past the kill the session lives on (no expiry, Done open) and the
// lock stays its (Lost open); the cluster still names it holder with the
// same token; the session's event stream reopens on another server, and a
// change made after the kill reaches the watch (re-registered with
// known_index, so even a change before the re-registration is delivered). X
// is a follower, then the raft leader; it is restarted between the cases.
func TestClientFailover(t *testing.T) {
	cluster := startCluster(t)
	other := newClient(t, cluster.URLs(), nil)
	writerSession := newSession(t, other, 10*time.Second)
	tests := []struct {
		name   string
		leader bool // whether X is the raft leader
	}{
		{name: "follower", leader: false},
		{name: "leader", leader: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leader := cluster.WaitLeader(20 * time.Second)
			x := (leader + 1) % len(cluster.Members)
			if tt.leader {
				x = leader
			}
			host := strings.TrimPrefix(cluster.Members[x].ClientURL, "http://")
			pin := &pinTransport{base: client.NewTransport(client.Config{}), pinned: host}
			c := newClient(t, cluster.URLs(), pin)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()

			s := newSession(t, c, failoverSessionTimeout)
			lock := recipe.NewLock(s, "failover-"+tt.name)
			token, err := lock.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lost := lock.Lost() // also watches the lock's node
			key := "/watched-" + tt.name
			if _, err := other.Put(ctx, key, "v0", client.WithSession(writerSession)); err != nil {
				t.Fatal(err)
			}
			w, err := s.Watch(ctx, key, client.Persistent())
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			putAndExpect(ctx, t, other, writerSession, w, key, "v1")
			if hosts := pin.streamHosts(); len(hosts) != 1 || hosts[0] != host {
				t.Fatalf("event streams opened on %v, want one on %s", hosts, host)
			}

			pin.unpin()
			cluster.Kill(x)
			killed := time.Now()
			putAndExpect(ctx, t, other, writerSession, w, key, "v2")
			t.Logf("X = %s (%s) killed; a change after the kill delivered %v later; streams: %v",
				cluster.Members[x].Name, tt.name, time.Since(killed).Round(time.Millisecond), pin.streamHosts())
			waitUntil(t, failoverSessionTimeout, "a heartbeat answered by another server", func() bool {
				return pin.heartbeatsAfter(killed, host) > 0
			})
			outlive(t, s, lock, lost, killed.Add(failoverSessionTimeout+time.Second))
			checkSurvived(ctx, t, s, lock, token)
			if hosts := pin.streamHosts(); hosts[len(hosts)-1] == host {
				t.Errorf("event stream still on the killed server: %v", hosts)
			}
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("release after failover: %v", err)
			}
			if err := cluster.Restart(x); err != nil {
				t.Fatal(err)
			}
			if _, err := cluster.FindLeader(20*time.Second, 0, 1, 2); err != nil {
				t.Fatalf("the restarted member did not rejoin: %v", err)
			}
		})
	}
}

// putAndExpect writes value to key and waits until w delivers an event at
// or after the write's index.
func putAndExpect(ctx context.Context, t *testing.T, c *client.Client, s *client.Session, w *client.Watcher, key, value string) {
	t.Helper()
	node, err := c.Put(ctx, key, value, client.WithSession(s))
	if err != nil {
		t.Fatalf("put %s=%s: %v", key, value, err)
	}
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch of %s ended: %v", key, w.Err())
			}
			if ev.Index >= node.ModifiedIndex {
				return
			}
		case <-timeout:
			t.Fatalf("no event for %s=%s (index %d) within 15s", key, value, node.ModifiedIndex)
		}
	}
}

// outlive fails the test if the session or the lock ends before until: a
// session the dead server alone kept alive would expire within a timeout.
func outlive(t *testing.T, s *client.Session, lock *recipe.Lock, lost <-chan struct{}, until time.Time) {
	t.Helper()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-s.Done():
		t.Fatalf("session ended: %v", s.Err())
	case <-lost:
		t.Fatalf("lock lost: %v", lock.Err())
	case <-timer.C:
	}
}

// checkSurvived checks that the cluster still names the session the lock's
// holder, with its token.
func checkSurvived(ctx context.Context, t *testing.T, s *client.Session, lock *recipe.Lock, token uint64) {
	t.Helper()
	state, err := s.Client().LockState(ctx, lock.Name())
	if err != nil {
		t.Fatal(err)
	}
	if state.Holder == nil || state.Holder.SessionHandle != s.Handle() || state.Holder.FencingToken != token {
		t.Fatalf("lock state after failover %+v, want held by session handle %s with token %d", state.Holder, s.Handle(), token)
	}
}

// pinTransport refuses (as a refused connection) every request to a host
// other than the pinned one, until unpin; it records the hosts on which
// session event streams were opened and the heartbeats answered 200.
type pinTransport struct {
	base http.RoundTripper

	mu         sync.Mutex // guards the fields below
	pinned     string     // host:port; "" lets everything through
	streams    []string
	heartbeats []answered
}

// answered is a request answered 200 by host at a time.
type answered struct {
	host string
	at   time.Time
}

func (p *pinTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p.mu.Lock()
	refused := p.pinned != "" && req.URL.Host != p.pinned
	if !refused && strings.HasSuffix(req.URL.Path, "/events") {
		p.streams = append(p.streams, req.URL.Host)
	}
	p.mu.Unlock()
	if refused {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("pinned to another server: %w", syscall.ECONNREFUSED)}
	}
	resp, err := p.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && req.URL.Path == "/v1/session/heartbeat" {
		p.mu.Lock()
		p.heartbeats = append(p.heartbeats, answered{host: req.URL.Host, at: time.Now()})
		p.mu.Unlock()
	}
	return resp, err
}

// heartbeatsAfter counts heartbeats answered by a host other than not,
// sent after since.
func (p *pinTransport) heartbeatsAfter(since time.Time, not string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, h := range p.heartbeats {
		if h.host != not && h.at.After(since) {
			n++
		}
	}
	return n
}

func (p *pinTransport) unpin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pinned = ""
}

func (p *pinTransport) streamHosts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.streams...)
}
