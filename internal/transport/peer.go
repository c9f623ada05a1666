package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/timeline"
)

// Peer states. Send queues while a peer is dialing or connected and drops at
// once while it is down (between a failure and the next dial attempt).
const (
	stateDialing int32 = iota
	stateConnected
	stateDown
)

// maxBatch bounds the messages written between two flushes.
const maxBatch = 512

var (
	errPeerClosed  = errors.New("peer closed the connection")
	errAddrChanged = errors.New("peer address changed")
)

// outgoing is one queued message: a raft message of a group, or an encoded
// peer frame.
type outgoing struct {
	group   uint64
	message raftpb.Message
	peer    []byte // the whole peer frame; nil for a raft message
}

// appendTo appends the item's frame to buf.
func (o *outgoing) appendTo(buf []byte) ([]byte, error) {
	if o.peer != nil {
		return append(buf, o.peer...), nil
	}
	return appendFrame(buf, o.group, &o.message)
}

// peer owns the outbound message connection to one node: a bounded queue
// filled by Send and one writer goroutine (run) that dials, drains the queue
// into batched frames and redials with backoff after failures.
type peer struct {
	t        *TCP
	id       uint64
	queue    chan outgoing
	state    atomic.Int32    // stateDialing, stateConnected or stateDown
	changed  chan struct{}   // capacity 1: the address changed, redial now
	ctx      context.Context // cancelled by stop; dials and handshakes give up with it
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returns
	stopOnce sync.Once
	sending  atomic.Bool // a snapshot to this peer is in flight

	mu   sync.Mutex // guards addr and conn
	addr string
	conn net.Conn // the current message connection, nil while not connected
}

func newPeer(t *TCP, id uint64, addr string) *peer {
	ctx, cancel := context.WithCancel(t.ctx)
	return &peer{
		t:       t,
		id:      id,
		addr:    addr,
		queue:   make(chan outgoing, t.cfg.QueueSize),
		changed: make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
}

// enqueue queues item without blocking, or drops it (reporting the peer
// unreachable to the item's group if it is a raft message).
func (p *peer) enqueue(item outgoing) {
	if p.state.Load() == stateDown {
		p.dropItem(item)
		return
	}
	select {
	case p.queue <- item:
	default:
		p.dropItem(item)
	}
}

// dropItem counts one message not sent; a raft message's group is told the
// peer is unreachable.
func (p *peer) dropItem(item outgoing) {
	if item.peer != nil {
		p.t.counters.messagesDropped.Add(1)
		return
	}
	p.t.drop(item.group, p.id, 1)
}

// setAddr changes where the peer is dialed; a changed address makes the
// writer drop its connection and redial.
func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	same := p.addr == addr
	p.addr = addr
	p.mu.Unlock()
	if same {
		return
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// stop ends the writer goroutine, closes its connection and waits for it.
func (p *peer) stop() {
	p.stopOnce.Do(func() {
		p.cancel()
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
		}
		p.mu.Unlock()
	})
	<-p.done
}

// run is the peer's writer goroutine. After a failed dial it waits with
// exponential backoff; after a connection that lasted at least MaxBackoff
// ended, it redials at once.
func (p *peer) run() {
	defer close(p.done)
	backoff := p.t.cfg.MinBackoff
	failures := 0
	for {
		p.state.Store(stateDialing)
		connected, err := p.connectAndStream()
		if connected == 0 && p.ctx.Err() == nil {
			p.t.counters.connectionsFailed.Add(1)
		}
		p.state.Store(stateDown)
		p.dropQueued()
		if p.ctx.Err() != nil {
			return
		}
		if connected >= p.t.cfg.MaxBackoff || errors.Is(err, errAddrChanged) {
			p.t.logger.Info("peer connection ended", "peer", p.id, "err", err)
			backoff, failures = p.t.cfg.MinBackoff, 0
			continue
		}
		if failures == 0 {
			p.t.logger.Warn("peer unreachable", "peer", p.id, "err", err)
		} else {
			p.t.logger.Debug("peer still unreachable", "peer", p.id, "err", err, "failures", failures)
		}
		failures++
		if !p.wait(jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, p.t.cfg.MaxBackoff)
	}
}

// connectAndStream dials the peer and writes queued messages until the
// connection fails or the peer is stopped. It returns how long the
// connection was up (0 if the dial or handshake failed) and why it ended.
func (p *peer) connectAndStream() (time.Duration, error) {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	conn, err := p.t.dial(p.ctx, addr, p.id, kindMessages)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		conn.Close()
		return 0, p.ctx.Err()
	}
	p.conn = conn
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		conn.Close()
	}()
	p.t.logger.Info("peer connected", "peer", p.id, "addr", addr)
	p.state.Store(stateConnected)
	started := time.Now()
	err = p.stream(conn)
	return time.Since(started), err
}

// stream writes batches of queued messages to conn. A reader goroutine
// watches conn so that a peer closing it is noticed without waiting for a write.
func (p *peer) stream(conn net.Conn) error {
	broken := make(chan struct{})
	go func() {
		defer close(broken)
		io.Copy(io.Discard, conn) // the acceptor never writes after the handshake
	}()
	defer func() {
		conn.Close()
		<-broken
	}()
	writer := newBufferedWriter(conn)
	var scratch []byte
	for {
		var first outgoing
		select {
		case first = <-p.queue:
		case <-broken:
			return errPeerClosed
		case <-p.changed:
			return errAddrChanged
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		timeline.Mark(timeline.WriterTook)
		var err error
		if scratch, err = p.writeBatch(conn, writer, first, scratch); err != nil {
			return err
		}
	}
}

// writeBatch writes first and whatever else is queued (up to maxBatch
// messages), then flushes once. On failure the batch's groups are reported
// unreachable.
func (p *peer) writeBatch(conn net.Conn, writer *bufio.Writer, first outgoing, scratch []byte) ([]byte, error) {
	var groups []uint64
	count, bytes := 0, 0
	item := first
	for {
		frame, err := item.appendTo(scratch[:0])
		scratch = frame
		switch {
		case err != nil || len(frame) > p.t.cfg.MaxFrameSize+4:
			p.t.logger.Error("dropping unsendable message", "peer", p.id, "type", item.message.Type, "bytes", len(frame), "err", err)
			p.dropItem(item)
		default:
			if item.peer == nil {
				groups = appendUnique(groups, item.group)
			}
			if _, err := writer.Write(frame); err != nil {
				return scratch, p.failBatch(groups, count+1, err)
			}
			count++
			bytes += len(frame)
		}
		if count >= maxBatch {
			break
		}
		var ok bool
		if item, ok = p.tryDequeue(); !ok {
			break
		}
	}
	conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
	if err := writer.Flush(); err != nil {
		return scratch, p.failBatch(groups, count, err)
	}
	timeline.Mark(timeline.WriterFlushed)
	p.t.counters.messagesSent.Add(uint64(count))
	p.t.counters.bytesSent.Add(uint64(bytes))
	return scratch, nil
}

func (p *peer) tryDequeue() (outgoing, bool) {
	select {
	case item := <-p.queue:
		return item, true
	default:
		return outgoing{}, false
	}
}

// failBatch reports a batch lost in a failed write.
func (p *peer) failBatch(groups []uint64, count int, err error) error {
	p.t.counters.messagesDropped.Add(uint64(count))
	for _, group := range groups {
		p.t.reports.unreachable(group, p.id)
	}
	return fmt.Errorf("write to peer %d: %w", p.id, err)
}

// dropQueued empties the queue after a failure, reporting each group once.
func (p *peer) dropQueued() {
	var groups []uint64
	count := 0
	for {
		item, ok := p.tryDequeue()
		if !ok {
			break
		}
		count++
		if item.peer == nil {
			groups = appendUnique(groups, item.group)
		}
	}
	p.t.counters.messagesDropped.Add(uint64(count))
	for _, group := range groups {
		p.t.reports.unreachable(group, p.id)
	}
}

// wait sleeps for d; it returns false if the peer was stopped meanwhile and
// returns early if the address changed.
func (p *peer) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-p.changed:
	case <-p.ctx.Done():
		return false
	}
	return true
}

// jitter spreads d over [d/2, d) so that peers do not redial in lockstep.
func jitter(d time.Duration) time.Duration {
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half)
}

func appendUnique(groups []uint64, group uint64) []uint64 {
	for _, g := range groups {
		if g == group {
			return groups
		}
	}
	return append(groups, group)
}
