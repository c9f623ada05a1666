package zkserver

import (
	"runtime"
	"time"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// The request pipeline of a connection: the reader decodes each request
// and gives it the requests before it that it must wait for (its
// dependencies); it then runs on its own goroutine, and one sender writes
// the replies in the order the requests came. Up to requestQueueLen
// requests of a connection are read and not yet answered.
//
// Which earlier requests a request waits for (its class, classOf):
//   - a barrier (closeSession, auth, setWatches, sync, multi, multiRead,
//     the watch operations, whoAmI, any other opcode) waits for every
//     request before it, and every request after it waits for it;
//   - a read waits for every earlier write of the connection (so it sees
//     them: a write raises the connection's floor before it completes)
//     and for the barriers; it runs beside earlier reads, but answers
//     only once the read before it is done, from a state at least as new
//     (readInOrder), and a watch it sets is its own (watchGen), so reads
//     of one path need no more order than that;
//   - a write waits for every request before it but pings, and, on a
//     cluster of one shard, but the writes: a connection's writes take
//     effect in the order they were sent, and none before an earlier read
//     was answered (ZooKeeper's FIFO client order: another client that
//     sees a later write never sees an earlier one missing, and a read
//     never sees a write sent after it, nor what follows it);
//   - a ping waits for the barriers only.
//
// A read or ping with nothing in flight before it runs on the reader's
// goroutine (it is quick, and that saves a hand-off); if every earlier
// request is also answered, the reader answers it too, and the sender
// never wakes for it (it woke twice per request: when the request was
// queued and when it was done), which is a client's common case of one
// request at a time.
//
// Writes in flight together (one shard) keep their order by the state
// machine, not by waiting: each holds a turn of the connection's write
// stream (server.WriteStream, given in request order by admit), is
// proposed only after the write before it was placed in the raft node's
// order of proposals (raftnode.Node.ProposePlaced), and is
// applied only if the write before it was (internal/fsm, stream.go). A
// write lost on its way to the log (a leader change) makes the state
// machine refuse every later write of the stream, unavailable: the
// connection ends unanswered (reply), as it does for a write whose outcome
// is unknown, so the client sees ConnectionLoss and never a later write
// applied without an earlier one. With several shards, whose logs cannot
// order each other, a write still waits for every write before it.
//
// So reads pipeline with reads, writes with writes (one shard), and a
// connection's requests take effect in the order it sent them.
//
// A request handed off runs on a goroutine kept from an earlier request
// (runners.go). The sender leaves a reply in the connection's buffer while
// the next request in order is already done, or is once the goroutines
// already runnable have run (it yields once), and flushes before it waits
// (nextDone): the replies of writes one apply completed leave together,
// and no reply waits for a request that is not done. The reader, which
// answers a lone read itself, leaves its reply buffered only while the
// next request is in its buffer already and is a read answered at once
// (conn.go, frameBuffered and answeredAtOnce).

// reqClass is how a request is ordered against the requests before it.
type reqClass uint8

const (
	classBarrier reqClass = iota
	classRead
	classWrite
	classPing
)

// pending is one request between its read and its reply.
type pending struct {
	h     zkproto.RequestHeader
	body  zkproto.Record // the decoded body, nil for none
	rest  []byte         // the bytes after the header (multi, multiRead)
	class reqClass
	deps  []*pending
	// turn is a write's place in the connection's write stream (nil: the
	// write waits for every earlier one instead); runPending ends it.
	turn     *server.WriteTurn
	turnRoom server.WriteTurn // where turn is made: one allocation with the request's
	// prevRead is the read before this one (read class), whose end this
	// one's waits for before it answers (readInOrder); the request's own
	// goroutine clears it when done, so that no chain of requests is kept.
	prevRead *pending
	// holds are the watches the request set: their notifications wait for
	// its reply (watchGen).
	holds []*watchGen

	// arrived is when the request's frame was read (its latency's start).
	arrived time.Time
	// reader decodes the frame, without a Reader made for each request;
	// the body's buffers (a write's data) are slices of the frame, which
	// is the request's own (zkproto.ReadFrame makes one for each).
	reader zkproto.Reader

	// Set before done is closed.
	resp zkproto.Record
	code zkproto.ErrCode
	// floor is the least zxid the reply may carry: the connection's seen
	// when the request was done (its own index and its predecessors'; no
	// later request has added to seen by then), 0 for a ping, which reads
	// nothing (conn.zxidLocked).
	floor uint64
	end   bool // end the connection after the reply
	mute  bool // send no reply (a frame without a header)
	done  chan struct{}
}

// newPending decodes frame into a pending request with its class. A body
// that does not decode is answered MarshallingError at once.
func newPending(frame []byte) *pending {
	p := &pending{done: make(chan struct{})}
	r := &p.reader
	r.Reset(frame, true)
	p.h.Decode(r)
	if r.Err() != nil {
		p.mute, p.end = true, true // not even a header: nothing to answer
		close(p.done)
		return p
	}
	p.rest = frame[r.Offset():]
	if rec, ok := zkproto.NewRequestBody(p.h.Type); ok && p.h.Type != zkproto.OpMulti && p.h.Type != zkproto.OpMultiRead {
		r.Reset(p.rest, true)
		if err := r.Record(rec, "request"); err != nil {
			p.code = zkproto.ErrMarshallingError
			p.class = classPing
			close(p.done)
			return p
		}
		p.body = rec
	}
	p.class = classOf(p.h.Type, p.body)
	return p
}

// classOf returns the class of a request.
func classOf(op zkproto.OpCode, body zkproto.Record) reqClass {
	switch body.(type) {
	case *zkproto.CreateRequest, *zkproto.DeleteRequest, *zkproto.SetDataRequest:
		return classWrite
	case *zkproto.PathWatchRequest, *zkproto.CheckVersionRequest, *zkproto.SetACLRequest:
		return classRead
	case *zkproto.PathRequest:
		if op == zkproto.OpGetACL || op == zkproto.OpGetAllChildrenNumber || op == zkproto.OpGetEphemerals {
			return classRead
		}
	case nil:
		if op == zkproto.OpPing {
			return classPing
		}
	}
	return classBarrier
}

// mustWait reports whether p, coming later, waits for the earlier q; with
// pipeline, a write does not wait for the earlier writes.
func (p *pending) mustWait(q *pending, pipeline bool) bool {
	switch {
	case p.class == classBarrier || q.class == classBarrier:
		return true
	case p.class == classPing || q.class == classPing:
		return false
	case p.class == classRead && q.class == classRead:
		return false // see readInOrder and watchGen
	case p.class == classRead:
		return q.class == classWrite
	}
	// p writes: after every earlier read, and after every earlier write
	// unless their turns order them.
	return !pipeline || q.class != classWrite
}

// hold records that p set watch g (none if p or g is nil).
func (p *pending) hold(g *watchGen) {
	if p != nil && g != nil {
		p.holds = append(p.holds, g)
	}
}

// inFlight is the reader's view of the requests not yet completed, in
// request order, to find a new request's dependencies. With several shards
// a read also waits for the earlier reads: its linearizable read of one
// shard says nothing of what an earlier read of another shard saw, so
// they are not run concurrently (readInOrder's catch-up compares indexes of
// one log).
type inFlight struct {
	list     []*pending
	lastRead *pending
	sharded  bool
	// writes is the connection's write stream, nil unless its writes are
	// pipelined (one shard): each write takes its turn in admit.
	writes *server.WriteStream
}

// admit gives p its dependencies among the uncompleted earlier requests,
// and reports whether none is in flight.
func (f *inFlight) admit(p *pending) bool {
	kept := f.list[:0]
	for _, q := range f.list {
		if q.answered() {
			continue
		}
		kept = append(kept, q)
		if p.mustWait(q, f.writes != nil) || f.sharded && p.class == classRead && q.class == classRead {
			p.deps = append(p.deps, q)
		}
	}
	if p.class == classRead {
		p.prevRead, f.lastRead = f.lastRead, p
	}
	if p.class == classWrite && f.writes != nil {
		p.turn = f.writes.NextIn(&p.turnRoom)
	}
	clear(f.list[len(kept):])
	f.list = append(kept, p)
	return len(kept) == 0
}

// answered reports whether p was answered as it was read (a frame that
// does not decode).
func (p *pending) answered() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runPending waits for p's dependencies, runs it (unless the connection is
// closing or an earlier request ends it) and marks it done.
func (c *conn) runPending(p *pending) {
	defer close(p.done)
	defer func() { p.prevRead = nil }()
	defer p.turn.End() // if it did not propose: the next write may
	for _, q := range p.deps {
		<-q.done
	}
	if c.ctx.Err() != nil || c.ending.Load() {
		p.mute = true
		return
	}
	defer func() {
		if p.end || p.code == zkproto.ErrSessionExpired || p.code == zkproto.ErrOperationTimeout {
			c.ending.Store(true)
		}
	}()
	if p.h.Type == zkproto.OpMulti || p.h.Type == zkproto.OpMultiRead {
		p.resp, p.code, p.end = c.multiOp(p.h.Type, p.rest)
	} else {
		p.resp, p.code, p.end = c.dispatch(p)
	}
	if p.class != classPing {
		p.floor = c.seen.Load()
	}
}

// sendReplies writes the replies in request order as the requests
// complete, and frees their slots.
func (c *conn) sendReplies(order <-chan *pending, slots <-chan struct{}) {
	for {
		p, ok := c.nextDone(order)
		if !ok {
			return
		}
		c.answer(p, true)
		<-slots
	}
}

// answering counts p out of the connection's requests in flight and, if
// it gets a reply, into the port's latencies. As in ZooKeeper, both are
// counted when the reply is ready, before it is written: a client that
// has read its reply finds srvr, stat and mntr agree.
func (c *conn) answering(p *pending) {
	c.inFlight.Add(-1)
	if !p.mute && c.ctx.Err() == nil && p.code != zkproto.ErrOperationTimeout {
		c.l.latencies.record(p.arrived)
	}
}

// nextDone returns the next request of order once it is done, and false
// once order is closed. Before it waits for either, it flushes the replies
// left buffered: a reply waits in the buffer only while the next one is
// ready too, or about to be (it yields once to let it finish).
func (c *conn) nextDone(order <-chan *pending) (*pending, bool) {
	var p *pending
	var ok bool
	select {
	case p, ok = <-order:
	default:
		c.flush()
		p, ok = <-order
	}
	if !ok {
		c.flush()
		return nil, false
	}
	select {
	case <-p.done:
	default:
		// The next reply is not ready, but the requests that one apply
		// completed with it may be: their goroutines readied and not yet
		// run. Let them run first, so that their replies share the flush
		// instead of each going out in a system call of its own: under
		// 64 clients pipelining on four connections the members made 2.1
		// write system calls per request without the yield, 1.2 with it
		// (docs/benchmarks.md).
		runtime.Gosched()
		select {
		case <-p.done:
			return p, true
		default:
		}
		c.flush()
		<-p.done
	}
	return p, true
}

// answer writes the reply of p, done, or ends the connection as p says;
// with batch set the reply may be left buffered, for whoever answers next
// to flush (the sender before it waits, the reader once no whole request
// is buffered).
// Replies leave in request order: the sender answers what the reader
// queued, and the reader answers a request itself only when nothing
// before it is unanswered.
func (c *conn) answer(p *pending, batch bool) {
	c.answering(p)
	switch {
	case c.ctx.Err() != nil:
	case p.mute:
		if p.end {
			c.flush() // the replies before it
			c.close()
		}
	case c.reply(p.h, p.resp, p.code, p.end, p.holds, p.floor, batch):
		c.flush()
		c.close()
	}
}
