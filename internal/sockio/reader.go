// Package sockio reads and writes a TCP socket of a client or peer
// connection with fewer system calls than a net.Conn makes, and without the
// runtime's system-call bookkeeping.
//
// A Go reader of a socket calls read(2) first and parks in the netpoller
// only when that fails with EAGAIN: a request-reply connection, whose next
// request comes only after the reply went out, pays one failed system call
// a request for each read it starts (net/http starts two: the next
// request's, and a background read of one byte while a handler runs). A
// reader instead keeps one read of the socket open (syscall.RawConn.Read,
// which parks between calls of its function without forgetting a
// readiness the netpoller saw meanwhile), and after a read that emptied
// the socket it waits to be told the socket is readable before it reads
// again. Reads and a Conn's writes are raw system calls: on a non-blocking
// socket they never block, so they need none of the bookkeeping that
// would also wake the runtime's monitor thread each time an idle process
// makes one.
//
// Invariants:
//   - The socket is read only when the consumer asked for bytes and holds
//     none not yet read: no more than one chunk is ever buffered.
//   - A read deadline that passes ends the consumer's wait, not the
//     socket's read: the bytes it was waiting for go to the next Read.
//   - Every byte read from the socket is returned by Read, in order, before
//     the error that ended the stream (io.EOF for an orderly close); an end
//     that arrived with the last bytes is seen within endProbe.
package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// chunkSize is the most one read of the socket takes. Chunks come from a
// pool and go back once the consumer has read one that did not fill it (the
// socket was emptied): an idle connection holds none. A full one is kept
// for the next read (spare), so a stream of bulk data reuses one chunk.
const chunkSize = 16 << 10

var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// reader reads a socket on its own goroutine, a chunk at a time, for one
// consumer at a time (Read may be called from different goroutines, not at
// once).
type reader struct {
	// conn is the socket (not a wrapper of it): its read deadline is the
	// reading goroutine's (endProbe), and its addresses go in errors.
	conn net.Conn

	// want carries the consumer's request for the next chunk to the
	// reading goroutine; chunks carries the answer. Each holds at most one.
	want   chan struct{}
	chunks chan chunk
	stop   chan struct{} // closed by Close
	once   sync.Once
	// done is closed when the reading goroutine has returned; final is
	// then what ended it (read only after done).
	done  chan struct{}
	final error
	read  func(fd int, p []byte) (int, error) // readSocket when made

	// The reading goroutine's own: a want is taken and not yet answered,
	// the stream ended, and readAskedFunc bound once (no allocation a
	// RawConn.Read).
	wanted, ended bool
	readAsked     func(fd uintptr) bool

	deadline deadline

	mu   sync.Mutex       // the consumer's state below
	held *[chunkSize]byte // the last chunk, until read to its end
	full bool             // held was filled by its read
	// spare is a chunk for the reading goroutine's next read: a full one
	// the consumer read to its end (set before the want that asks for the
	// next), or one a read found the socket empty for.
	spare *[chunkSize]byte
	left  []byte // what Read has not yet returned of it
	err   error  // what ended the stream, once its last chunk is read
	asked bool   // a want was sent and its chunk not yet taken
}

// chunk is what one read of the socket gave: buf[:n], or err.
type chunk struct {
	buf *[chunkSize]byte
	n   int
	err error
}

// newReader starts reading conn, a socket, through raw: the reader then
// owns it for reading, and nothing else may read it.
func newReader(conn net.Conn, raw syscall.RawConn) *reader {
	r := &reader{conn: conn, want: make(chan struct{}, 1), chunks: make(chan chunk, 1),
		stop: make(chan struct{}), done: make(chan struct{}), read: readSocket}
	r.readAsked = r.readAskedFunc
	r.deadline.init()
	go r.run(raw)
	return r
}

// run reads the socket, one chunk for each want, until a read fails, the
// socket ends or Close is called. It waits for a want outside any read of
// the socket, so that the socket's own Close never waits for it; once
// asked, it reads inside syscall.RawConn.Read, and after a read that
// emptied the socket of data it stays there, parked in the netpoller,
// until the socket is readable again: only inside one RawConn.Read is a
// readiness that came meanwhile kept. If the consumer has not asked for
// more by then, it leaves, and reads at once when asked.
//
// A read that returns data does not say whether the peer's end (FIN) or an
// error came with it, and their readiness was then used by that read: so
// after it the wait has a deadline (endProbe), past which the socket is
// read again whether or not it is readable.
func (r *reader) run(raw syscall.RawConn) {
	r.final = net.ErrClosed
	defer close(r.done)
	for {
		if !r.wanted {
			select {
			case <-r.want:
				r.wanted = true
			case <-r.stop:
				return
			}
		}
		err := raw.Read(r.readAsked)
		switch {
		case r.ended:
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Read again, without a deadline: nothing is ambiguous after a
			// read that finds the socket empty.
			if err := r.conn.SetReadDeadline(time.Time{}); err != nil {
				r.endWith(err)
				return
			}
		case err != nil:
			r.endWith(err)
			return
		}
	}
}

// readAskedFunc is run's function for RawConn.Read (bound once as
// readAsked):
// it reads a chunk for each want, and returns false to wait for the
// socket to be readable, true to leave (readable and not asked, or the
// stream ended).
func (r *reader) readAskedFunc(fd uintptr) bool {
	for {
		if !r.wanted {
			select {
			case <-r.want:
				r.wanted = true
			default:
				return true // readable, and not asked: read once asked
			}
		}
		c, got, more := r.readChunk(int(fd))
		if !got {
			return false // a readiness already used: wait for the next
		}
		r.wanted = false
		r.chunks <- c
		if c.err != nil {
			r.ended = true
			return true
		}
		if !more {
			// Emptied of data: wait for the socket to be readable, or
			// until endProbe has passed.
			r.conn.SetReadDeadline(time.Now().Add(endProbe))
			return false
		}
	}
}

// endProbe is how long after a read that returned data the socket is read
// again though the netpoller has not said it is readable: the delay, at
// most, with which an end or error that arrived with that data is seen.
const endProbe = time.Second

// endWith gives the consumer err, if it asked for a chunk, once the socket
// can no longer be read, and keeps it for a later ask.
func (r *reader) endWith(err error) {
	r.final = err
	if r.wanted {
		r.chunks <- chunk{err: err}
	}
}

// readChunk reads the socket once: got is false if it had nothing
// (EAGAIN); more says the socket may hold more (the chunk is full).
func (r *reader) readChunk(fd int) (c chunk, got, more bool) {
	buf := r.spare
	if buf != nil {
		r.spare = nil
	} else {
		buf = chunkPool.Get().(*[chunkSize]byte)
	}
	n, err := r.read(fd, buf[:])
	switch {
	case err == nil && n > 0:
		return chunk{buf: buf, n: n}, true, n == chunkSize
	case errors.Is(err, syscall.EAGAIN):
		r.spare = buf // for the read after the next readiness
		return chunk{}, false, false
	}
	chunkPool.Put(buf)
	if err != nil {
		return chunk{err: &net.OpError{Op: "read", Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: os.NewSyscallError("read", err)}}, true, false
	}
	return chunk{err: io.EOF}, true, false
}

// readSocket reads the socket for the readers made after it is set; a test
// counts its calls.
var readSocket = readNoEINTR

// readNoEINTR is read(2) of a non-blocking socket (sysRead), tried again
// when a signal interrupts it.
func readNoEINTR(fd int, p []byte) (int, error) {
	for {
		n, errno := sysRead(fd, p)
		switch errno {
		case 0:
			return n, nil
		case syscall.EINTR:
			continue
		}
		return 0, errno
	}
}

// Read reads into p what the socket has, waiting until it has something,
// the stream ends, or the read deadline passes.
func (r *reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	if len(r.left) == 0 && r.err == nil {
		if err := r.awaitChunk(); err != nil {
			return 0, err
		}
	}
	if len(r.left) > 0 {
		n := copy(p, r.left)
		r.left = r.left[n:]
		if len(r.left) == 0 {
			if r.full {
				r.spare = r.held
			} else {
				chunkPool.Put(r.held)
			}
			r.held = nil
		}
		return n, nil
	}
	return 0, r.err
}

// awaitChunk asks for the next chunk, unless it was asked for already,
// and waits for it; r.mu must be held. It returns an error only when the
// read deadline ended the wait.
func (r *reader) awaitChunk() error {
	if !r.asked {
		select {
		case r.want <- struct{}{}:
		case <-r.stop:
			r.err = net.ErrClosed
			return nil
		}
		r.asked = true
	}
	select {
	case c := <-r.chunks:
		r.take(c)
		return nil
	case <-r.done:
		select {
		case c := <-r.chunks: // sent before the goroutine returned
			r.take(c)
		default:
			r.err = r.final
		}
		return nil
	case <-r.deadline.passed():
		return &net.OpError{Op: "read", Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: os.ErrDeadlineExceeded}
	case <-r.stop:
		r.err = net.ErrClosed
		return nil
	}
}

// take makes c the chunk Read returns from; r.mu must be held.
func (r *reader) take(c chunk) {
	r.asked = false
	r.err = c.err
	if c.n > 0 {
		r.held, r.left, r.full = c.buf, c.buf[:c.n], c.n == chunkSize
	}
}

// SetReadDeadline sets when a Read waiting for the socket gives up (the
// zero time: never), as net.Conn's does; it applies to a Read already
// waiting.
func (r *reader) SetReadDeadline(t time.Time) { r.deadline.set(t) }

// Close stops the reading goroutine where it waits for a want; closing the
// socket, the caller's, ends it where it waits for the socket.
func (r *reader) Close() {
	r.once.Do(func() { close(r.stop) })
	r.deadline.set(time.Time{})
}
