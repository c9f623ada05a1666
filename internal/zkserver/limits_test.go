package zkserver

import (
	"bufio"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// dialFrom is dialRaw from the loopback address local (127.0.0.x).
func dialFrom(t *testing.T, local, addr string) *rawClient {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// refused reports whether the server closed r's connection instead of
// answering its connect request: the read ends at EOF or a reset within
// refusalWithin (a closed connection, not a slow one).
func (r *rawClient) refused() bool {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(refusalWithin))
	resp, err := r.connect(sessionRequest())
	switch {
	case err == nil:
		r.t.Logf("connect answered: session 0x%x", resp.SessionID)
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return true
	default:
		r.t.Logf("connect neither answered nor closed within %v: %v", refusalWithin, err)
		return false
	}
}

// refusalWithin bounds the wait for a refused connection's close: the
// listener closes it as it accepts it.
const refusalWithin = 5 * time.Second

// skipWithoutLoopbackAlias skips t where the host cannot dial from local
// (127.0.0.2 and above answer on Linux's loopback, not everywhere).
func skipWithoutLoopbackAlias(t *testing.T, local string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(local, "0"))
	if err != nil {
		t.Skipf("this host has no loopback address %s (needed to connect from several hosts): %v", local, err)
	}
	ln.Close()
}

// waitConns waits until l holds n connections.
func waitConns(t *testing.T, l *Listener, n int) {
	t.Helper()
	if !testcluster.WaitFor(10*time.Second, func() bool { return l.connCount() == n }) {
		t.Fatalf("listener holds %d connections, want %d", l.connCount(), n)
	}
}

// TestConnectionCap: past MaxConnections a connection is closed before its
// handshake, counted in mntr's zk_connection_rejected; a slot freed by a
// closed connection is taken by the next; a go-zookeeper client refused by a
// full member gets its session from another.
func TestConnectionCap(t *testing.T) {
	c := startZK(t, 1, Config{MaxConnections: 3, FourLetterWords: []string{"mntr", "conf"}})
	addr, l := c.addrs[0], c.listeners[0]
	held := []*rawClient{dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)}
	for _, r := range held {
		r.session()
	}
	if !dialRaw(t, addr).refused() {
		t.Fatal("a fourth connection got a session past MaxConnections 3")
	}
	held[0].nc.Close()
	waitConns(t, l, 2)
	dialRaw(t, addr).session()
	waitConns(t, l, 3)
	if !dialRaw(t, addr).refused() {
		t.Fatal("a connection got a session past MaxConnections 3 after a slot was reused")
	}
	if got := l.refused.Load(); got != 2 {
		t.Fatalf("refused = %d, want 2", got)
	}

	// A client given a full member and a free one ends on the free one.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := New(c.Nodes[0].Server, Config{Addr: free.Addr().String()})
	go other.Serve(free)
	t.Cleanup(func() { other.Close() })
	conn, _ := connect(t, []string{addr, free.Addr().String()}, 10*time.Second)
	if _, err := conn.Create("/capped", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create through the member with room: %v", err)
	}
	if other.connCount() != 1 {
		t.Fatalf("the uncapped listener holds %d connections, want the client's 1", other.connCount())
	}

	held[1].nc.Close()
	waitConns(t, l, 2)
	mntr := fourLetterWord(t, addr, "mntr")
	if !strings.Contains(mntr, "zk_connection_rejected\t") || strings.Contains(mntr, "zk_connection_rejected\t0\n") {
		t.Fatalf("mntr does not count the refusals: %q", mntr)
	}
}

// TestConnectionCapPerHost: MaxConnectionsPerHost counts connections by
// remote IP address, as ZooKeeper's maxClientCnxns, and conf reports it.
func TestConnectionCapPerHost(t *testing.T) {
	skipWithoutLoopbackAlias(t, "127.0.0.2")
	skipWithoutLoopbackAlias(t, "127.0.0.3")
	c := startZK(t, 1, Config{MaxConnectionsPerHost: 2, FourLetterWords: []string{"conf"}})
	addr, l := c.addrs[0], c.listeners[0]
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	a1.session()
	a2.session()
	if !dialFrom(t, "127.0.0.1", addr).refused() {
		t.Fatal("a third connection from 127.0.0.1 got a session past 2 per host")
	}
	dialFrom(t, "127.0.0.2", addr).session()
	dialFrom(t, "127.0.0.2", addr).session()
	if !dialFrom(t, "127.0.0.2", addr).refused() {
		t.Fatal("a third connection from 127.0.0.2 got a session past 2 per host")
	}
	a1.nc.Close()
	waitConns(t, l, 3)
	dialFrom(t, "127.0.0.1", addr).session()
	waitConns(t, l, 4)
	l.mu.Lock()
	perHost := maps.Clone(l.perHost)
	l.mu.Unlock()
	if len(perHost) != 2 || perHost["127.0.0.1"] != 2 || perHost["127.0.0.2"] != 2 {
		t.Fatalf("per-host counts = %v, want 2 each", perHost)
	}
	// conf needs a slot: from a third address.
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if conf := readWord(t, nc, "conf"); !strings.Contains(conf, "maxClientCnxns=2\n") {
		t.Fatalf("conf = %q", conf)
	}
}

// failingListener fails its first failures accepts as a process out of
// file descriptors does, then accepts from the listener it wraps.
type failingListener struct {
	net.Listener
	failures atomic.Int32
}

func (f *failingListener) Accept() (net.Conn, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// serveFailing serves a one-member cluster on a listener whose first
// failures accepts fail; pauses, if set, replaces the pauses after them.
// Serve's result arrives on served.
func serveFailing(t *testing.T, failures int32, pauses [2]time.Duration) (l *Listener, fl *failingListener, served chan error) {
	t.Helper()
	c := startZK(t, 1, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl = &failingListener{Listener: ln}
	fl.failures.Store(failures)
	l = New(c.Nodes[0].Server, Config{Addr: ln.Addr().String()})
	if pauses[0] > 0 {
		l.acceptPauses = pauses
	}
	served = make(chan error, 1)
	go func() { served <- l.Serve(fl) }()
	return l, fl, served
}

// closeServing closes l and fails t unless Serve returns ErrClosed soon.
func closeServing(t *testing.T, l *Listener, served chan error) {
	t.Helper()
	l.Close()
	select {
	case err := <-served:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Serve after Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of Close")
	}
}

// TestAcceptFailuresAreRetried: a listener whose accepts fail for a while
// (too many open files) keeps serving once they succeed again, rather than
// ending, which stopped latchd.
func TestAcceptFailuresAreRetried(t *testing.T) {
	l, fl, served := serveFailing(t, 5, [2]time.Duration{})
	conn, _ := connect(t, []string{fl.Addr().String()}, 10*time.Second)
	if _, err := conn.Create("/after-emfile", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create after failed accepts: %v", err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned after failed accepts: %v", err)
	default:
	}
	closeServing(t, l, served)
}

// TestCloseEndsAcceptPause: Close ends Serve at once even while it waits
// out the pause after a failed accept (an hour here).
func TestCloseEndsAcceptPause(t *testing.T) {
	const failures = 1 << 30
	l, fl, served := serveFailing(t, failures, [2]time.Duration{time.Hour, time.Hour})
	if !testcluster.WaitFor(10*time.Second, func() bool { return fl.failures.Load() < failures }) {
		t.Fatal("Serve never called Accept")
	}
	closeServing(t, l, served)
}
