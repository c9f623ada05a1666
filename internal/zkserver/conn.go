package zkserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/sockio"
	"github.com/latch-io/latch/internal/timeline"
	"github.com/latch-io/latch/internal/zkproto"
)

// requestQueueLen bounds the requests a connection has read and not yet
// answered; past it the reader stops reading and TCP pushes back.
const requestQueueLen = 256

// conn is one client connection.
type conn struct {
	l  *Listener
	nc net.Conn
	br *bufio.Reader

	wmu sync.Mutex // guards bw, unflushed, sentZxid and the order of frames on the wire
	bw  *bufio.Writer
	// unflushed counts the frames in bw since its last flush.
	unflushed int
	// sentZxid is the zxid of the last frame sent (zxidLocked).
	sentZxid uint64
	// encoder encodes the frame being sent (guarded by wmu); its buffer is
	// kept for the next one unless a large reply grew it.
	encoder zkproto.Writer

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc
	once   sync.Once

	session uint64
	timeout time.Duration
	stream  server.EventStream // set before ready is closed
	watches *watchTable
	// writes is the stream whose turns order the connection's pipelined
	// writes (pipeline.go), made at the handshake; nil with several
	// shards, where writes are not pipelined.
	writes *server.WriteStream

	// credsMu guards creds: what the connection proved (its verified
	// certificate's name, the user of its digest addauth), which every
	// request carries to the server's authorization (auth.go).
	credsMu sync.Mutex
	creds   server.Credentials
	// credsCtx is the connection's context carrying creds, made by the
	// first requestContext after they change (nil until then): one for all
	// requests, not one each.
	credsCtx context.Context
	// ready is closed once the session is usable (its event stream
	// attached): at the handshake, or for an anonymous connection with auth
	// enabled at its first successful addauth (auth.go).
	ready chan struct{}
	// unborn: the session id was told to the client, and the session is
	// created at addauth. deferredWatches are the setWatches that came
	// before it. Both are used by the request goroutine only.
	unborn          bool
	deferredWatches []*zkproto.SetWatches

	// seen is the highest zxid sent to the client or read (or written) on
	// its behalf: every read waits for it. A request's reply carries at
	// least what seen was when the request was done (pending.floor).
	seen atomic.Uint64
	// through is an index of shard 0 (the log of zxids) through which
	// every change's events have been dispatched to the watch table
	// (awaitNotifications raises it): their notifications are sent, or
	// held in watches the table counts as owed (watchTable.owedFrom).
	through atomic.Uint64
	active  atomic.Bool // a request arrived since the last heartbeat
	// closing is set by closeSession before it ends the session, so that
	// the end of the session's event stream does not close the connection
	// before closeSession's reply is sent (the request pipeline closes it
	// after the reply).
	closing atomic.Bool
	// ending is set once a request that ends the connection has run: the
	// requests after it are not run.
	ending   atomic.Bool
	received atomic.Uint64
	sent     atomic.Uint64
	// inFlight counts the requests read and not yet answered (srvr's
	// Outstanding, stat's queued).
	inFlight atomic.Int64

	// handled counts the events of stream that pumpEvents has dispatched
	// (their notifications sent); progress (capacity 1) wakes
	// awaitNotifications after each, and pumpDone is closed when
	// pumpEvents returns.
	handled  atomic.Uint64
	progress chan struct{}
	pumpDone chan struct{}
}

func newConn(l *Listener, nc net.Conn) *conn {
	nc = sockio.Wrap(nc) // requests read without the read(2) that finds none, replies written raw
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{l: l, nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc), ctx: ctx, cancel: cancel,
		progress: make(chan struct{}, 1), pumpDone: make(chan struct{}), ready: make(chan struct{})}
}

// close ends the connection (idempotent); the session stays.
func (c *conn) close() {
	c.once.Do(func() {
		c.cancel()
		c.nc.Close()
	})
}

// serve runs the connection: the first packet (a four-letter word or the
// connect request), then the request pipeline until the connection ends.
func (c *conn) serve() {
	defer c.close()
	_ = c.nc.SetReadDeadline(time.Now().Add(c.l.cfg.HandshakeTimeout))
	var head [4]byte
	if _, err := io.ReadFull(c.br, head[:]); err != nil {
		return
	}
	if word := string(head[:]); zooKeeperWords[word] {
		c.fourLetter(word)
		return
	}
	body, err := readBody(c.br, head)
	if err != nil {
		c.l.log.Debug("zk: bad first packet", "remote", c.nc.RemoteAddr().String(), "err", err)
		return
	}
	if !c.handshake(body) {
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	defer c.cleanup()
	c.run()
}

// readBody reads the record of a frame whose length bytes are head.
func readBody(r io.Reader, head [4]byte) ([]byte, error) {
	n := int32(binary.BigEndian.Uint32(head[:]))
	if n < 0 || n > zkproto.MaxPacket {
		return nil, zkproto.ErrFrameTooLarge
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}

// run starts the event pump, the heartbeat loop and the reply sender, then
// reads requests and starts each once the requests it depends on are done
// (pipeline.go).
func (c *conn) run() {
	order := make(chan *pending, requestQueueLen)
	slots := make(chan struct{}, requestQueueLen)
	var workers, requests sync.WaitGroup
	workers.Add(3)
	go func() { defer workers.Done(); c.sendReplies(order, slots) }()
	go func() { defer workers.Done(); c.pumpEvents() }()
	go func() { defer workers.Done(); c.heartbeats() }()
	defer workers.Wait()
	defer close(order)
	defer requests.Wait()
	flight := inFlight{sharded: c.l.sharded, writes: c.writes}
	for {
		frame, err := zkproto.ReadFrame(c.br, zkproto.MaxPacket)
		arrived := time.Now()
		if err != nil {
			if !errors.Is(err, io.EOF) && c.ctx.Err() == nil {
				c.l.log.Debug("zk: read", "session", c.session, "err", err)
			}
			c.close()
			return
		}
		timeline.Mark(timeline.RequestRead)
		c.received.Add(1)
		c.l.received.Add(1)
		c.active.Store(true)
		// No slot taken: every earlier request is answered, and the
		// sender idle (it frees a slot after the reply, and only this
		// goroutine takes them).
		quiet := len(slots) == 0
		p := newPending(frame)
		p.arrived = arrived
		c.inFlight.Add(1)
		if p.answered() {
			c.l.log.Debug("zk: bad request", "session", c.session, "op", p.h.Type)
		}
		alone := !p.answered() && flight.admit(p)
		quick := p.class == classRead || p.class == classPing
		if alone && quick && quiet {
			// Alone, quick, and nothing to answer before it: run and
			// answer it here, without a hand-off either way. Its reply
			// may wait in the buffer while the next request is read
			// already (a client pipelining reads), to leave with that
			// one's, but only if that one cannot wait on anything.
			if !c.answeredAtOnce(p) {
				c.flush()
			}
			c.runPending(p)
			c.answer(p, c.frameBuffered())
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		order <- p // never blocks: a slot is held
		if p.answered() {
			continue
		}
		if alone && quick {
			// Alone in flight, and quick: run it here, without a hand-off.
			c.runPending(p)
			continue
		}
		requests.Add(1)
		c.l.runners.do(func() { defer requests.Done(); c.runPending(p) })
	}
}

// frameBuffered reports whether a whole request frame, of a length
// ReadFrame takes, is in the read buffer already: the reader's next
// ReadFrame returns it without waiting or failing. A reply the reader
// leaves buffered until then is flushed before or after that request is
// answered: the reader flushes before running it unless it is answered at
// once (answeredAtOnce), and after it unless another whole frame follows
// (up to maxUnflushed); the sender flushes before it waits.
func (c *conn) frameBuffered() bool {
	if c.br.Buffered() < 4 {
		return false
	}
	head, err := c.br.Peek(4)
	if err != nil {
		return false
	}
	n := int32(binary.BigEndian.Uint32(head))
	return n >= 0 && n <= zkproto.MaxPacket && c.br.Buffered() >= 4+int(n)
}

// answeredAtOnce reports whether request p, run by the reader, is answered
// from the member's state without waiting on anything (a leader, a watch
// to register, notifications to send first): a read that sets no watch,
// on a cluster of one shard, whose reads are local. Only such a request
// may keep a reply before it waiting in the buffer while it runs.
func (c *conn) answeredAtOnce(p *pending) bool {
	if c.l.sharded {
		return false // linearizable reads: a round to the leader
	}
	switch req := p.body.(type) {
	case *zkproto.PathWatchRequest:
		return !req.Watch
	case *zkproto.CheckVersionRequest:
		return true
	}
	return false // a ping heartbeats the session; the rest are rare
}

// cleanup runs when the connection ends: its latch watches are cancelled
// and its event stream closed; the session lives on.
func (c *conn) cleanup() {
	c.watches.cancelAll()
	if c.stream != nil {
		c.stream.Close()
	}
}

// heartbeats keeps the session alive while the client talks to this
// connection: every third of the timeout, if any packet came since the
// last one (ZooKeeper counts any packet, not only pings).
func (c *conn) heartbeats() {
	t := time.NewTicker(max(c.timeout/3, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			if c.active.Swap(false) && c.isReady() {
				c.heartbeat()
			}
		}
	}
}

// heartbeat tells the session's liveness the client is there; a session
// found dead ends the connection (the client then learns of the expiry
// when it reconnects).
func (c *conn) heartbeat() bool {
	ctx, cancel := context.WithTimeout(c.requestContext(), c.timeout)
	defer cancel()
	_, dead, err := c.l.srv.Heartbeat(ctx, []uint64{c.session})
	if err == nil && len(dead) > 0 {
		c.l.log.Info("zk: session ended", "session", c.session)
		c.close()
		return false
	}
	return true
}

// zxidLocked returns the zxid of the next frame, the reply of a request
// that read or wrote up to floor (0 for a notification or a ping); c.wmu
// must be held. A client keeps the zxid of its latest reply (ZooKeeper's
// Java client and go-zookeeper take none from pings and notifications)
// and gives it back after a reconnect as lastZxidSeen and relativeZxid,
// and setWatches then reports a change to a watch only if it is past it:
// so no frame may carry a zxid at or past a change before every
// notification that change causes on the connection is sent (pings and
// notifications included, for a client that would take theirs). The
// zxid is
//
//	max(sentZxid, floor, min(through, owedFrom-1))
//
// min(through, owedFrom-1) is such a zxid: every change up to through
// has had its events dispatched (awaitNotifications), each notification
// either sent or counted in owedFrom (held behind a reply, or waiting in a
// watch not yet armed; watchTable.oweLocked). through is loaded first: it is
// raised only after those events were dispatched and counted. sentZxid
// keeps the zxids the connection sends from ever going down, and floor a
// reply from carrying less than the state its request (and those before
// it) saw, so that a client reconnecting anywhere with it never reads an
// older state. Neither lifts the zxid past an owed notification, on one
// shard (with several, floor may hold an index of another shard's log, as
// the zxids of such a cluster do):
//   - a reply is sent after awaitNotifications, so through is at least the
//     member's applied index then, which covers floor (a write is applied
//     here before it returns, a read reads what was applied here, a sync
//     returns the index applied here); the replies before it released
//     their watches, so what is owed is owed by watches of this request or
//     of later ones (requests are answered in order);
//   - those watches owe only changes past floor: a read arms its own at
//     the index it read, at least seen once the read before it was done,
//     and what seen gained since is zxids sent meanwhile, each below what
//     the read's watches owe (the last point); an addWatch arms its own at
//     the index its latch watch was registered at, applied after every
//     earlier request; setWatches owes nothing once done (its watches
//     notify as they fire, before its reply); a later request reads or
//     registers after this one is done (a read waits for the earlier
//     writes and barriers, and re-reads from seen once the read before it
//     is done), and floor is seen when this request was done, before any
//     later request added to it (pipelined writes excepted, which own no
//     watches: a request that sets one waits for the writes before it);
//   - so no zxid sent exceeds the cap it was computed with: each was below
//     every notification owed when it was sent, and one counted owed after
//     that is of a change dispatched after it, so past the through it was
//     capped at (an event dispatched before to a watch not yet armed stays
//     counted while it turns into a held notification).
//
// A notification counted owed that does not fire (an event a watch not
// yet armed turns out to have seen in its read) only lowers the cap for a
// while. Where awaitNotifications gives up (the event stream ended or is
// stuck) through is not raised and the reply carries floor.
func (c *conn) zxidLocked(floor uint64) int64 {
	z := c.through.Load()
	if c.watches != nil {
		if owed := c.watches.owedFrom.Load(); owed <= z {
			z = owed - 1 // owed > 0: no change is at index 0
		}
	}
	z = max(z, floor, c.sentZxid)
	c.sentZxid = z
	c.saw(z)
	return int64(z)
}

// saw records that the client has seen (or, for a sync, must see) index.
func (c *conn) saw(index uint64) { raise(&c.seen, index) }

// sawRefusal records, for a write the state refused (NodeExists, NoNode,
// BadVersion, NotEmpty, at its place in the log), that its reply shows the
// state that refused it: the member has applied it when the refusal
// returns, so its applied index covers it. Without it the reply's zxid
// could stay below that state (the connection's floor moves only with what
// its requests saw), and a client reconnecting with it to a member behind
// could read the node it was told exists as missing. Raising the floor to
// the applied index leaves no notification behind: the connection's
// earlier replies released theirs, and a later request's watch reads at or
// past the floor, so no change up to it fires that watch.
func (c *conn) sawRefusal() { c.sawState(c.l.srv.AppliedIndex()) }

// sawState records that a request's reply shows (or, for a sync, that the
// client must see) the state at index of the log of the request's shard.
// With several shards it records nothing: the connection's zxids are then
// indexes of shard 0's log only, since a client presents its last zxid at
// a reconnect (compared with shard 0's applied index) and to setWatches
// (compared with shard 0's zxids), and an index of another shard's log is
// none of shard 0's (it may run ahead of it); reads there are linearizable
// instead of waiting for the connection's zxid (readOptions).
func (c *conn) sawState(index uint64) {
	if !c.l.sharded {
		c.saw(index)
	}
}

// raise sets v to index if it is below.
func raise(v *atomic.Uint64, index uint64) {
	for {
		old := v.Load()
		if index <= old || v.CompareAndSwap(old, index) {
			return
		}
	}
}

// send writes one reply or notification and flushes it with whatever the
// sender left buffered: the header, then body if the header carries no
// error.
func (c *conn) send(h zkproto.ReplyHeader, body zkproto.Record) error {
	return c.sendFrame(h, body, true)
}

// sendFrame writes one reply or notification, and flushes the connection's
// buffer if flush is set. h.Zxid is the reply's floor (zxidLocked), and
// becomes the frame's zxid. The sender leaves its replies buffered while the
// next one is ready too (sendReplies), so that the replies of writes
// completed by one apply leave in one system call, and the reader leaves a
// read's reply while the next request, a read answered at once, is in its
// buffer (run); whoever writes next with flush set, or the sender before
// it waits, or the reader, sends them.
func (c *conn) sendFrame(h zkproto.ReplyHeader, body zkproto.Record, flush bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := &c.encoder
	w.Reset(w.Bytes()[:0])
	h.Zxid = c.zxidLocked(uint64(max(h.Zxid, 0)))
	h.Encode(w)
	if body != nil && h.Err == zkproto.ErrOK {
		body.Encode(w)
	}
	err := c.writeFrameLocked(w.Bytes(), flush)
	if cap(w.Bytes()) > maxKeptReplyBuffer {
		w.Reset(nil)
	}
	return err
}

// maxKeptReplyBuffer is the largest reply buffer a connection keeps
// between replies: a getData of a large value should not pin its size.
const maxKeptReplyBuffer = 4 << 10

// maxUnflushed is how many frames the sender and the reader may leave
// buffered: a bound on how long a batch waits for its flush.
const maxUnflushed = 64

// writeFrame writes and flushes one frame; c.wmu must be held.
func (c *conn) writeFrame(record []byte) error {
	return c.writeFrameLocked(record, true)
}

// writeFrameLocked writes one frame, and flushes it (and the frames left
// buffered before it) if flush is set or the batch is full; c.wmu must be
// held. The write deadline is set right before each system call: a frame
// that spills the buffer, and the flush.
func (c *conn) writeFrameLocked(record []byte, flush bool) error {
	if len(record) > zkproto.MaxPacket {
		// No client would read it (jute.maxbuffer): end the connection
		// rather than send it, after the replies before it.
		_ = c.flushLocked()
		c.close()
		return zkproto.ErrFrameTooLarge
	}
	if len(record)+4 > c.bw.Available() {
		c.setWriteDeadline()
	}
	// The length, then the record, straight into the buffer.
	length := binary.BigEndian.AppendUint32(c.bw.AvailableBuffer(), uint32(len(record)))
	if _, err := c.bw.Write(length); err != nil {
		c.close()
		return err
	}
	if _, err := c.bw.Write(record); err != nil {
		c.close()
		return err
	}
	c.unflushed++
	c.sent.Add(1)
	c.l.sent.Add(1)
	if flush || c.unflushed >= maxUnflushed {
		return c.flushLocked()
	}
	return nil
}

// setWriteDeadline gives the next write to the client the connection's
// write timeout.
func (c *conn) setWriteDeadline() {
	_ = c.nc.SetWriteDeadline(time.Now().Add(max(c.timeout, 5*time.Second)))
}

// flush sends the frames left buffered, if any.
func (c *conn) flush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.flushLocked()
}

// flushLocked sends the buffered frames; c.wmu must be held.
func (c *conn) flushLocked() error {
	if c.unflushed == 0 {
		return nil
	}
	c.unflushed = 0
	c.setWriteDeadline()
	if err := c.bw.Flush(); err != nil {
		c.close()
		return err
	}
	timeline.Mark(timeline.ReplyFlushed)
	return nil
}
