package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/sockio"
)

// TCP is the transport between real processes: one outbound message
// connection per peer (so one per direction between two nodes), plus one
// short-lived connection per snapshot. It implements Transport.
type TCP struct {
	cfg      Config
	logger   *slog.Logger
	listener net.Listener
	ctx      context.Context // cancelled by Close; passed to Handler.Process
	cancel   context.CancelFunc
	reports  *reporter
	counters counters
	wg       sync.WaitGroup // every goroutine the transport started

	mu      sync.RWMutex // guards the fields below
	peers   map[uint64]*peer
	conns   map[net.Conn]struct{}     // accepted connections and outbound snapshot connections, closed by Close
	streams map[uint64]*inboundStream // the newest inbound message connection from each peer
	closed  bool
}

var _ Transport = (*TCP)(nil)

var errUnknownPeer = errors.New("no such peer")

// NewTCP starts a transport listening for peers. Add peers with AddPeer.
func NewTCP(cfg Config) (*TCP, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	listener := cfg.Listener
	if listener == nil {
		listener, err = net.Listen("tcp", cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("transport: listen on %s: %w", cfg.ListenAddr, err)
		}
	}
	if cfg.ServerTLS != nil {
		listener = tls.NewListener(listener, cfg.ServerTLS)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{
		cfg:      cfg,
		logger:   cfg.Logger.With("component", "transport", "node", cfg.ID),
		listener: listener,
		ctx:      ctx,
		cancel:   cancel,
		reports:  newReporter(cfg.Handler),
		peers:    make(map[uint64]*peer),
		conns:    make(map[net.Conn]struct{}),
		streams:  make(map[uint64]*inboundStream),
	}
	t.start(func() { t.reports.run(ctx) })
	t.start(t.acceptLoop)
	return t, nil
}

// withDefaults validates cfg and fills in zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.ID == 0 {
		return cfg, errors.New("transport: config: ID must not be 0")
	}
	if cfg.Handler == nil {
		return cfg, errors.New("transport: config: Handler is required")
	}
	if cfg.Listener == nil && cfg.ListenAddr == "" {
		return cfg, errors.New("transport: config: Listener or ListenAddr is required")
	}
	if (cfg.ServerTLS == nil) != (cfg.ClientTLS == nil) {
		return cfg, ErrTLSConfig
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	setDefault(&cfg.Shards, 1)
	if cfg.Shards > 1<<16-1 {
		return cfg, fmt.Errorf("transport: config: %d shards do not fit the handshake's 16 bits", cfg.Shards)
	}
	setDefault(&cfg.QueueSize, 4096)
	setDefault(&cfg.MaxFrameSize, 64<<20)
	setDefault(&cfg.SnapshotChunkSize, 256<<10)
	setDefault(&cfg.DialTimeout, time.Second)
	setDefault(&cfg.WriteTimeout, 5*time.Second)
	setDefault(&cfg.HandshakeTimeout, 5*time.Second)
	setDefault(&cfg.SnapshotTimeout, 2*time.Minute)
	setDefault(&cfg.MinBackoff, 50*time.Millisecond)
	setDefault(&cfg.MaxBackoff, time.Second)
	cfg.SnapshotChunkSize = min(cfg.SnapshotChunkSize, cfg.MaxFrameSize)
	return cfg, nil
}

func setDefault[T int | time.Duration](field *T, value T) {
	if *field <= 0 {
		*field = value
	}
}

// Addr is the address peers dial to reach this transport.
func (t *TCP) Addr() net.Addr { return t.listener.Addr() }

// Stats returns the transport's counters.
func (t *TCP) Stats() Stats { return t.counters.snapshot() }

// Send implements Transport. It never blocks on the network.
func (t *TCP) Send(group uint64, msgs []raftpb.Message) {
	for i := range msgs {
		m := msgs[i]
		if m.To == t.cfg.ID || m.To == 0 {
			continue
		}
		t.mu.RLock()
		p, closed := t.peers[m.To], t.closed
		t.mu.RUnlock()
		switch {
		case closed:
			return
		case p == nil && m.Type == raftpb.MsgSnap:
			to := m.To
			t.start(func() { t.reportSnapshot(group, to, fmt.Errorf("peer %d unknown: %w", to, errUnknownPeer)) })
		case p == nil:
			t.drop(group, m.To, 1)
		case m.Type == raftpb.MsgSnap:
			p.sendSnapshot(group, m)
		default:
			p.enqueue(outgoing{group: group, message: m})
		}
	}
}

// SendPeer implements Transport. It never blocks on the network.
func (t *TCP) SendPeer(to uint64, m PeerMessage) {
	if to == t.cfg.ID || to == 0 {
		return
	}
	frame, err := appendPeerFrame(nil, m)
	if err != nil {
		t.logger.Error("dropping unsendable peer message", "peer", to, "type", fmt.Sprintf("%T", m), "err", err)
		t.counters.messagesDropped.Add(1)
		return
	}
	t.mu.RLock()
	p, closed := t.peers[to], t.closed
	t.mu.RUnlock()
	switch {
	case closed:
	case p == nil:
		t.counters.messagesDropped.Add(1)
	default:
		p.enqueue(outgoing{peer: frame})
	}
}

// drop counts n dropped messages to peer id of group and reports the peer unreachable.
func (t *TCP) drop(group, id uint64, n int) {
	t.counters.messagesDropped.Add(uint64(n))
	t.reports.unreachable(group, id)
}

// AddPeer implements Transport. addr is host:port; a URL such as
// tcp://host:port or http://host:port is reduced to its host:port.
func (t *TCP) AddPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.ID {
		return
	}
	addr = dialAddress(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		p.setAddr(addr)
		return
	}
	p := newPeer(t, id, addr)
	t.peers[id] = p
	t.start(p.run)
}

// dialAddress reduces a peer URL to the host:port to dial.
func dialAddress(addr string) string {
	if !strings.Contains(addr, "://") {
		return addr
	}
	if parsed, err := url.Parse(addr); err == nil && parsed.Host != "" {
		return parsed.Host
	}
	return addr
}

// RemovePeer implements Transport.
func (t *TCP) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// Close implements Transport. It waits for every goroutine to end.
func (t *TCP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[uint64]*peer{}
	for conn := range t.conns {
		conn.Close()
	}
	t.mu.Unlock()

	t.cancel()
	err := t.listener.Close()
	for _, p := range peers {
		p.stop()
	}
	t.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("transport: close listener: %w", err)
	}
	return nil
}

// start runs f in a goroutine that Close waits for.
func (t *TCP) start(f func()) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
}

// track registers conn to be closed by Close; it returns false, having
// closed conn, if the transport is already closed.
func (t *TCP) track(conn net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		conn.Close()
		return false
	}
	t.conns[conn] = struct{}{}
	return true
}

// untrack closes conn and forgets it.
func (t *TCP) untrack(conn net.Conn) {
	t.mu.Lock()
	delete(t.conns, conn)
	t.mu.Unlock()
	conn.Close()
}

// dial connects to addr and completes the handshake for a connection of kind to peer id.
// Cancelling ctx abandons the dial or the handshake.
func (t *TCP) dial(ctx context.Context, addr string, id uint64, kind uint8) (net.Conn, error) {
	dialer := net.Dialer{
		Timeout: t.cfg.DialTimeout,
		Control: controlPeerSocket,
		// Idle links (between followers) find a dead peer within ~11 s.
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3},
	}
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial peer %d at %s: %w", id, addr, err)
	}
	conn = sockio.Wrap(conn) // frames written with raw system calls
	raw := conn
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	if conn, err = t.secure(ctx, conn, addr); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS with peer %d at %s: %w", id, addr, err)
	}
	if err := t.clientHandshake(conn, id, kind); err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake with peer %d at %s: %w", id, addr, err)
	}
	return conn, nil
}

// secure runs the TLS handshake on a dialed conn when the transport is
// configured for TLS, and returns the connection to use (conn itself
// without TLS).
func (t *TCP) secure(ctx context.Context, conn net.Conn, addr string) (net.Conn, error) {
	if t.cfg.ClientTLS == nil {
		return conn, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return conn, err
	}
	tlsConn := tls.Client(conn, t.cfg.ClientTLS(host))
	ctx, cancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		return conn, err
	}
	return tlsConn, nil
}

func (t *TCP) clientHandshake(conn net.Conn, id uint64, kind uint8) error {
	conn.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	hello := handshake{version: protocolVersion, kind: kind, shards: uint16(t.cfg.Shards), cluster: t.cfg.ClusterID, from: t.cfg.ID, to: id}
	if _, err := conn.Write(hello.encode()); err != nil {
		return err
	}
	var status [1]byte
	if _, err := conn.Read(status[:]); err != nil {
		return fmt.Errorf("read handshake status: %w", err)
	}
	if err := statusError(status[0]); err != nil {
		return err
	}
	return conn.SetDeadline(time.Time{})
}

// counters are the atomic fields behind Stats.
type counters struct {
	messagesSent, bytesSent, messagesDropped       atomic.Uint64
	messagesReceived, bytesReceived                atomic.Uint64
	messagesMisaddressed                           atomic.Uint64
	peerMessagesReceived, peerFramesDropped        atomic.Uint64
	connectionsFailed, framesRejected              atomic.Uint64
	snapshotsSent, snapshotsFailed, snapshotsRecvd atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		MessagesSent:         c.messagesSent.Load(),
		BytesSent:            c.bytesSent.Load(),
		MessagesDropped:      c.messagesDropped.Load(),
		MessagesReceived:     c.messagesReceived.Load(),
		BytesReceived:        c.bytesReceived.Load(),
		ConnectionsFailed:    c.connectionsFailed.Load(),
		FramesRejected:       c.framesRejected.Load(),
		MessagesMisaddressed: c.messagesMisaddressed.Load(),
		PeerMessagesReceived: c.peerMessagesReceived.Load(),
		PeerFramesDropped:    c.peerFramesDropped.Load(),
		SnapshotsSent:        c.snapshotsSent.Load(),
		SnapshotsFailed:      c.snapshotsFailed.Load(),
		SnapshotsReceived:    c.snapshotsRecvd.Load(),
	}
}

// reporter calls Handler.ReportUnreachable from its own goroutine, so Send
// never waits on the handler. Reports to the same (group, peer) coalesce.
type reporter struct {
	handler Handler
	wake    chan struct{} // capacity 1: a report is pending

	mu      sync.Mutex // guards pending
	pending map[[2]uint64]struct{}
}

func newReporter(h Handler) *reporter {
	return &reporter{handler: h, wake: make(chan struct{}, 1), pending: make(map[[2]uint64]struct{})}
}

func (r *reporter) unreachable(group, id uint64) {
	r.mu.Lock()
	r.pending[[2]uint64{group, id}] = struct{}{}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reporter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		pending := r.pending
		r.pending = make(map[[2]uint64]struct{})
		r.mu.Unlock()
		for key := range pending {
			r.handler.ReportUnreachable(key[0], key[1])
		}
	}
}

// reportSnapshot tells the handler how a snapshot to id ended and counts it.
func (t *TCP) reportSnapshot(group, id uint64, err error) {
	if err != nil {
		t.counters.snapshotsFailed.Add(1)
		t.logger.Warn("snapshot send failed", "group", group, "peer", id, "err", err)
		t.cfg.Handler.ReportSnapshot(group, id, raft.SnapshotFailure)
		return
	}
	t.counters.snapshotsSent.Add(1)
	t.cfg.Handler.ReportSnapshot(group, id, raft.SnapshotFinish)
}

// newBufferedWriter wraps conn for batched frame writes.
func newBufferedWriter(conn net.Conn) *bufio.Writer { return bufio.NewWriterSize(conn, 64<<10) }
