package chaos

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check"
)

// zkLocks is workload F over the ZooKeeper listener: zkClients ZooKeeper
// clients (go-zookeeper, each connected to every member's ZooKeeper port,
// failing over as it does) take turns on go-zookeeper's lock recipe at
// w.lockDir. A holder's fencing token is the czxid of its lock node (the
// raft index that created it, docs/zookeeper.md). The protected resource is
// latch itself: the holder writes through the ZooKeeper port with its
// token, as one multi that sets the fence node (w.fence) at the version it
// read and appends a sequential entry "token session" beside it, and only
// if its token is not below the one the fence holds (a stale holder is
// refused: an overlap caught). The multi is a compare-and-set through the
// log, so the log's own order is the resource's.
//
// Checker: the entries, in sequence order (the log's), carry tokens that
// never decrease, and each token belongs to one session.
type zkLocks struct {
	// lockDir holds the lock's nodes; resource holds the fence node and the
	// entries.
	lockDir, resource string

	auth  string      // digest credentials "user:password", "" without auth
	tls   *tls.Config // for the members' ZooKeeper ports, nil without TLS
	addrs []string

	refused  atomic.Int64 // writes refused as stale: overlapping holders caught
	written  atomic.Int64 // writes acknowledged
	unknown  atomic.Int64 // writes of unknown outcome
	holds    atomic.Int64 // tenures: lock acquired and our node the lowest
	lostLock atomic.Int64 // Lock returned but our node was gone

	unchecked bool // planted bug (c): the holders write without comparing tokens

	stalls     atomic.Int64 // holders whose session ended mid-tenure (stall)
	staleTried atomic.Int64 // of which wrote again once the fence had moved past them

	mu     sync.Mutex // guards conns and closed
	conns  []*zk.Conn // closed when the run stops, which ends a blocked Lock
	closed bool       // set when conns were closed: no new ones
}

const (
	zkClients = 3
	zkDir     = "/zk"
	zkTimeout = 4 * time.Second
	// zkStallEvery: one tenure in this many stalls (zkLocks.stall).
	zkStallEvery = 6
)

func (w *zkLocks) start(r *run) {
	for _, m := range r.cluster.Members {
		w.addrs = append(w.addrs, m.ZKAddr)
	}
	w.lockDir, w.resource = zkDir+"/lock", zkDir+"/res"
	for _, path := range []string{w.lockDir, w.fence()} {
		if err := r.createOverHTTP(path, "0"); err != nil {
			r.Anomaly("zk: %v", err)
			return
		}
	}
	w.tls = r.tlsConfig
	if r.cfg.Auth && r.cfg.ZKAuth {
		w.auth = zkUser.name + ":" + authPassword
		w.tls = r.userTLS(zkUser.name)
	}
	r.Workers.Add(1)
	go func() {
		defer r.Workers.Done()
		<-r.Stopping()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closed = true
		for _, c := range w.conns {
			c.Close()
		}
	}()
	for c := range zkClients {
		r.Workers.Add(1)
		go w.client(r, c)
	}
}

func (w *zkLocks) fence() string { return w.resource + "/fence" }

// createOverHTTP creates path (and its ancestors) with value as the
// harness, retrying while the cluster settles.
func (r *run) createOverHTTP(path, value string) error {
	var err error
	for range 50 {
		ctx, cancel := check.RequestContext()
		err = check.CallWith(ctx, r.harness, http.MethodPut, r.Node(), "/v1/kv"+path, nil, &api.PutRequest{Value: value}, nil)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("create %s: %w", path, err)
}

// quietLogger drops go-zookeeper's log lines (a connection attempt to each
// member refused while they are down is expected under faults); the
// workload logs the errors its calls return.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a ZooKeeper connection to every member.
func (w *zkLocks) connect() (*zk.Conn, error) {
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout(network, address, timeout)
	}
	if w.tls != nil {
		dial = func(network, address string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, w.tls)
		}
	}
	conn, _, err := zk.Connect(w.addrs, zkTimeout, zk.WithLogger(quietLogger{}), zk.WithDialer(dial))
	if err != nil {
		return nil, err
	}
	if w.auth != "" {
		if err := conn.AddAuth("digest", []byte(w.auth)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zk auth: %w", err)
		}
	}
	return conn, nil
}

// zkClient is one ZooKeeper lock client; one goroutine runs it.
type zkClient struct {
	worker int
	conn   *zk.Conn // replaced when a stall ends its session
	random *rand.Rand
}

func (w *zkLocks) client(r *run, worker int) {
	defer r.Workers.Done()
	c := &zkClient{worker: worker, random: rand.New(rand.NewPCG(r.cfg.Seed, uint64(worker)+0x7a6b))}
	if err := w.reconnect(c); err != nil {
		if !r.Stopped() {
			r.Anomaly("liveness: zk: connect: %v", err)
		}
		return
	}
	for failed := 0; !r.Stopped(); {
		if err := w.round(r, c); err != nil && !r.Stopped() {
			if failed++; failed <= 5 {
				r.Logf("chaos zk: client %d: %v", worker, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// zkConnectAttempts bounds the connects of one reconnect: a member killed
// or replaced while a new connection's addauth is in flight closes it
// (go-zookeeper's ErrConnectionClosed), and every member down at once (a
// kill-all) fails it after one try of each (ErrNoServer); a client meets
// both by connecting anew, as an application would.
const zkConnectAttempts = 20

// retryConnect reports whether a connect that failed with err is tried
// again.
func retryConnect(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)
}

// reconnect gives c a new connection, closed when the run stops.
func (w *zkLocks) reconnect(c *zkClient) error {
	conn, err := w.connect()
	for attempt := 1; err != nil && retryConnect(err) && attempt < zkConnectAttempts; attempt++ {
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond) // back off before the next connect
		conn, err = w.connect()
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		conn.Close()
		return errors.New("zk: the run stopped")
	}
	w.conns = append(w.conns, conn)
	c.conn = conn
	return nil
}

// round is one tenure: lock, write, work, write, unlock. One in
// zkStallEvery stalls instead of working (stall).
func (w *zkLocks) round(r *run, c *zkClient) error {
	lock := zk.NewLock(c.conn, w.lockDir, zk.WorldACL(zk.PermAll))
	if err := lock.Lock(); err != nil {
		return err
	}
	defer func() { _ = lock.Unlock() }()
	token, err := w.token(c.conn)
	if err != nil {
		w.lostLock.Add(1)
		return err
	}
	w.holds.Add(1)
	session := c.conn.SessionID()
	if err := w.write(c.conn, token, session); err != nil {
		return err
	}
	if c.random.IntN(zkStallEvery) == 0 {
		return w.stall(r, c, token, session)
	}
	time.Sleep(time.Duration(50+c.random.IntN(250)) * time.Millisecond) // the work
	return w.write(c.conn, token, session)
}

// stall plays a holder whose session ended while it was paused: its
// session ends (the connection closes, and the lock node goes with it),
// and once another holder wrote with a higher token it writes again with
// its old one, over a new connection. The fence must refuse it.
func (w *zkLocks) stall(r *run, c *zkClient, token uint64, session int64) error {
	w.stalls.Add(1)
	c.conn.Close()
	if err := w.reconnect(c); err != nil {
		return err
	}
	for deadline := time.Now().Add(4 * zkTimeout); time.Now().Before(deadline) && !r.Stopped(); {
		if data, _, err := c.conn.Get(w.fence()); err == nil {
			if fenced, _ := strconv.ParseUint(string(data), 10, 64); fenced > token {
				w.staleTried.Add(1)
				return w.write(c.conn, token, session)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// errNotHolder means the lock recipe returned but the lowest lock node is
// not this session's (its session ended meanwhile).
var errNotHolder = errors.New("zk: the lowest lock node is not ours")

// token returns the czxid of the lowest lock node, which must be this
// session's: the holder's fencing token.
func (w *zkLocks) token(conn *zk.Conn) (uint64, error) {
	children, _, err := conn.Children(w.lockDir)
	if err != nil {
		return 0, err
	}
	if len(children) == 0 {
		return 0, errNotHolder
	}
	lowest := slices.MinFunc(children, func(a, b string) int { return zkSequence(a) - zkSequence(b) })
	_, stat, err := conn.Get(w.lockDir + "/" + lowest)
	if err != nil {
		return 0, err
	}
	if stat.EphemeralOwner != conn.SessionID() {
		return 0, errNotHolder
	}
	return uint64(stat.Czxid), nil
}

// zkSequence is the sequence number ending a sequential node's name.
func zkSequence(name string) int {
	n, _ := strconv.Atoi(name[max(0, len(name)-10):])
	return n
}

// write is the fenced write through latch: refused if the fence holds a
// higher token, else the fence set to token at the version read and an
// entry appended, in one multi. A version conflict (another holder wrote
// meanwhile) reads the fence again.
func (w *zkLocks) write(conn *zk.Conn, token uint64, session int64) error {
	for attempt := 0; attempt < 10; attempt++ {
		data, stat, err := conn.Get(w.fence())
		if err != nil {
			return err
		}
		fenced, _ := strconv.ParseUint(string(data), 10, 64)
		if token < fenced && !w.unchecked {
			w.refused.Add(1)
			return nil
		}
		value := []byte(strconv.FormatUint(token, 10))
		entry := []byte(fmt.Sprintf("%d %d", token, session))
		_, err = conn.Multi(
			&zk.SetDataRequest{Path: w.fence(), Data: value, Version: stat.Version},
			&zk.CreateRequest{Path: w.resource + "/entry-", Data: entry, Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagSequence},
		)
		switch {
		case err == nil:
			w.written.Add(1)
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			continue
		case errors.Is(err, zk.ErrNoNode):
			return err
		default:
			w.unknown.Add(1)
			return err
		}
	}
	return errors.New("zk: the fence kept changing")
}

func (w *zkLocks) check(r *run) error {
	conn, err := w.connect()
	if err != nil {
		return fmt.Errorf("zk: connect for the check: %w", err)
	}
	defer conn.Close()
	names, _, err := conn.Children(w.resource)
	if err != nil {
		return fmt.Errorf("zk: list %s: %w", w.resource, err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, "entry-") })
	slices.SortFunc(names, func(a, b string) int { return zkSequence(a) - zkSequence(b) })
	var highest uint64
	owner := map[uint64]string{}
	stale := 0
	for _, name := range names {
		data, _, err := conn.Get(w.resource + "/" + name)
		if err != nil {
			return fmt.Errorf("zk: read %s: %w", name, err)
		}
		tokenText, session, _ := strings.Cut(string(data), " ")
		token, _ := strconv.ParseUint(tokenText, 10, 64)
		if token < highest {
			stale++
			if stale <= 5 {
				r.Anomaly("F: zk: entry %s has token %d after token %d in the log's order", name, token, highest)
			}
		}
		if other, ok := owner[token]; ok && other != session {
			r.Anomaly("F: zk: token %d written by sessions %s and %s", token, other, session)
		}
		owner[token] = session
		highest = max(highest, token)
	}
	refused := int(w.refused.Load())
	r.Update(func(report *Report) {
		report.Operations += len(names) + refused
		report.StaleWrites += stale
		report.Overlaps += refused
		report.ZKEntries += len(names)
	})
	r.Logf("chaos zk: %d tenures (%d lost before writing), %d fenced writes logged (%d acknowledged, %d unknown), %d refused as stale; "+
		"%d holders stalled past their session, %d of them wrote again once the fence had moved; %d stale in the log",
		w.holds.Load(), w.lostLock.Load(), len(names), w.written.Load(), w.unknown.Load(), refused, w.stalls.Load(), w.staleTried.Load(), stale)
	if len(names) == 0 {
		r.Anomaly("liveness: zk: no fenced write went through the ZooKeeper lock")
	}
	return nil
}
