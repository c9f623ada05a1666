package zkserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// Config tunes a Listener.
type Config struct {
	// FourLetterWords lists the four-letter words the port answers (ruok,
	// srvr, stat, mntr, conf, isro); "*" allows them all. ZooKeeper's other
	// words (cons, dump, envi, wchs, ...), which latch does not implement,
	// and these when not listed get ZooKeeper's "is not executed because
	// it is not in the whitelist".
	FourLetterWords []string
	// Addr is the listen address the conf word reports.
	Addr string
	// HandshakeTimeout bounds the wait for a connection's first packet
	// (default 10s).
	HandshakeTimeout time.Duration
	// ConnectCatchUp bounds the wait for this member to apply a client's
	// lastZxidSeen before the connect is refused (default 2s).
	ConnectCatchUp time.Duration
	// MaxConnections caps the listener's open connections (0: no cap).
	// MaxConnectionsPerHost caps those from one IP address (0: no cap), as
	// ZooKeeper's maxClientCnxns. A connection over either cap is closed at
	// once, before its handshake, as ZooKeeper closes one: its client tries
	// another member. The caps keep a storm of connections from taking the
	// file descriptors the member's log and peers need.
	MaxConnections        int
	MaxConnectionsPerHost int
	Logger                *slog.Logger
}

// DefaultFourLetterWords is ZooKeeper's default whitelist.
var DefaultFourLetterWords = []string{"srvr"}

// ParseFourLetterWords parses a comma-separated whitelist ("*" for all)
// and refuses a word latch does not implement, ZooKeeper's other words
// included: listing one would not make the port answer it.
func ParseFourLetterWords(list string) ([]string, error) {
	var out []string
	for _, w := range strings.Split(list, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "":
			continue
		case w == "*":
		case fourLetterWords[w] == nil:
			known := make([]string, 0, len(fourLetterWords))
			for k := range fourLetterWords {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("unknown four-letter word %q: want some of %s, or *", w, strings.Join(known, ","))
		}
		out = append(out, w)
	}
	return out, nil
}

// Listener serves ZooKeeper's client protocol for one latch server.
type Listener struct {
	srv     *server.Server
	cfg     Config
	log     *slog.Logger
	allowed map[string]bool
	started time.Time
	// sharded: the cluster has more than one shard (each with its own log).
	sharded bool

	// runners runs the connections' requests (runners.go).
	runners *runners

	mu      sync.Mutex
	conns   map[*conn]struct{}
	perHost map[string]int // open connections by remote IP, when MaxConnectionsPerHost is set
	lns     []net.Listener
	closed  bool
	done    chan struct{} // closed by Close: ends an accept-retry pause
	wg      sync.WaitGroup

	// refused counts the connections closed over a cap (mntr's
	// zk_connection_rejected); lastRefusalLog and lastAcceptLog rate-limit
	// the log lines about refusals and accept failures.
	refused                       atomic.Uint64
	lastRefusalLog, lastAcceptLog atomic.Int64
	// acceptPauses are the first and the longest pause after a failed
	// accept (acceptPauseMin, acceptPauseMax; tests lengthen them).
	acceptPauses [2]time.Duration

	received, sent atomic.Uint64 // packets, for srvr and mntr
	latencies      *latencies    // of the requests answered, for srvr and mntr

	// beforeRead, if set (by tests), runs before each read of a read
	// request: it delays some to reorder concurrent reads.
	beforeRead atomic.Pointer[func()]
	// beforeWrite, if set (by tests), runs before each pipelined write is
	// proposed, with its xid and turn: it holds writes back, or loses one
	// (server.WriteTurn.LoseForTest).
	beforeWrite atomic.Pointer[func(xid int32, turn *server.WriteTurn)]
	// replyHook, if set (by tests), runs in each reply before it waits for
	// the connection's notifications (awaited false) and after (true), with
	// the request's opcode: a change it makes lands after the request's
	// read and before its reply. nil in production.
	replyHook atomic.Pointer[func(op zkproto.OpCode, awaited bool)]
}

// New returns a listener serving srv.
func New(srv *server.Server, cfg Config) *Listener {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.ConnectCatchUp <= 0 {
		cfg.ConnectCatchUp = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	allowed := map[string]bool{}
	for _, w := range cfg.FourLetterWords {
		allowed[w] = true
	}
	return &Listener{srv: srv, cfg: cfg, log: cfg.Logger, allowed: allowed, started: time.Now(), conns: map[*conn]struct{}{},
		perHost: map[string]int{}, done: make(chan struct{}), acceptPauses: [2]time.Duration{acceptPauseMin, acceptPauseMax}, latencies: newLatencies(), sharded: srv.Config().Shards > 1, runners: newRunners(maxIdleRunners)}
}

// maxIdleRunners bounds the goroutines kept waiting for requests: enough
// for a few hundred requests in flight, a few MiB of stacks at most.
const maxIdleRunners = 256

// ErrClosed is returned by Serve once Close was called.
var ErrClosed = errors.New("zkserver: listener closed")

// Serve accepts connections on ln until Close; it always returns an error.
// A failed accept (out of file descriptors, say) is logged and retried
// after a pause growing from 5 ms to 1 s, as the peer port does: the
// listener outlasts a storm of connections rather than ending with it.
func (l *Listener) Serve(ln net.Listener) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	l.lns = append(l.lns, ln)
	l.mu.Unlock()
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if l.isClosed() || errors.Is(err, net.ErrClosed) {
				return ErrClosed
			}
			pause = min(max(2*pause, l.acceptPauses[0]), l.acceptPauses[1])
			l.logRateLimited(&l.lastAcceptLog, "ZooKeeper port: accept failed; retrying", "err", err, "pause", pause)
			if !l.pause(pause) {
				return ErrClosed
			}
			continue
		}
		pause = 0
		c, res := l.track(nc)
		switch res {
		case trackClosed:
			nc.Close()
			return ErrClosed
		case trackOverCap:
			l.refuse(nc)
			continue
		}
		go func() {
			defer l.wg.Done()
			defer l.untrack(c)
			c.serve()
		}()
	}
}

// The pause after a failed accept: doubled from acceptPauseMin on each
// failure in a row, at most acceptPauseMax.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
	// logEvery rate-limits the log lines about refusals and accept failures.
	logEvery = 10 * time.Second
)

// pause waits d after a failed accept; it reports false if Close came first.
func (l *Listener) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// refuse closes nc, a connection over a cap, before anything is built for it.
func (l *Listener) refuse(nc net.Conn) {
	n := l.refused.Add(1)
	l.logRateLimited(&l.lastRefusalLog, "ZooKeeper port: refusing connections over the cap",
		"max_connections", l.cfg.MaxConnections, "max_per_host", l.cfg.MaxConnectionsPerHost,
		"remote", nc.RemoteAddr().String(), "refused_total", n)
	nc.Close()
}

// logRateLimited logs a warning at most once per logEvery per last.
func (l *Listener) logRateLimited(last *atomic.Int64, msg string, args ...any) {
	now := time.Now().UnixNano()
	if prev := last.Load(); now-prev >= int64(logEvery) && last.CompareAndSwap(prev, now) {
		l.log.Warn(msg, args...)
	}
}

func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// The outcomes of track.
type trackResult int

const (
	tracked trackResult = iota
	trackClosed
	trackOverCap
)

// track builds and records the connection for nc, unless the listener is
// closed or nc is over a connection cap: the caps are checked first, so a
// storm of refused connections costs no buffers.
func (l *Listener) track(nc net.Conn) (*conn, trackResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, trackClosed
	}
	if l.cfg.MaxConnections > 0 && len(l.conns) >= l.cfg.MaxConnections {
		return nil, trackOverCap
	}
	if l.cfg.MaxConnectionsPerHost > 0 {
		host := remoteHost(nc)
		if l.perHost[host] >= l.cfg.MaxConnectionsPerHost {
			return nil, trackOverCap
		}
		l.perHost[host]++
	}
	c := newConn(l, nc)
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	return c, tracked
}

func (l *Listener) untrack(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
	if l.cfg.MaxConnectionsPerHost > 0 {
		host := remoteHost(c.nc)
		if l.perHost[host] <= 1 {
			delete(l.perHost, host)
		} else {
			l.perHost[host]--
		}
	}
}

// remoteHost is the IP address nc comes from (its whole remote address if
// that has no port).
func remoteHost(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// connCount is the number of open connections.
func (l *Listener) connCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Close stops accepting, closes every connection and waits for them.
// Sessions stay: they expire unless their clients reconnect elsewhere.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		close(l.done)
	}
	l.closed = true
	lns := l.lns
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	l.wg.Wait()
	l.runners.stop()
	return nil
}
