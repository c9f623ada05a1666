package sockio

import (
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Conn is a TCP connection read through a reader and written with raw
// system calls.
type Conn struct {
	net.Conn
	reader *reader
	raw    syscall.RawConn

	// One Write at a time (as the socket's own lock would have it): the
	// write under way, and writeSome bound once, so that a Write
	// allocates nothing.
	wmu   sync.Mutex
	w     pendingWrite
	write func(fd uintptr) bool
}

// pendingWrite is the Write under way: its bytes, how many are written,
// and the error that stopped it.
type pendingWrite struct {
	p       []byte
	written int
	failed  error
}

// Wrap returns c read through a reader if c is a plain TCP connection, and
// c itself otherwise (a TLS connection reads its records as it must).
// Reading c other than through the returned connection loses bytes.
func Wrap(c net.Conn) net.Conn {
	tcp, plain := c.(*net.TCPConn)
	if !plain {
		return c
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return c
	}
	conn := &Conn{Conn: c, reader: newReader(tcp, raw), raw: raw}
	conn.write = conn.writeSome
	return conn
}

// Write writes p whole, or fails, as net.Conn's does, with write(2) calls
// on the non-blocking socket (sysWrite); while the socket's buffer is full
// it waits in the netpoller, until the write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.w = pendingWrite{p: p}
	err := c.raw.Write(c.write)
	w := c.w
	c.w = pendingWrite{}
	if w.failed == nil {
		w.failed = err
	}
	if w.failed != nil {
		return w.written, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: w.failed}
	}
	return w.written, nil
}

// writeSome writes what is left of c.w until the socket's buffer is full
// (false: wait for room) or all is written or a write fails (true).
func (c *Conn) writeSome(fd uintptr) bool {
	w := &c.w
	for w.written < len(w.p) {
		n, errno := sysWrite(int(fd), w.p[w.written:])
		switch errno {
		case 0:
			w.written += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			w.failed = os.NewSyscallError("write", errno)
			return true
		}
	}
	return true
}

func (c *Conn) Read(p []byte) (int, error) { return c.reader.Read(p) }

// SetReadDeadline sets when a Read gives up; the socket's own read
// deadline is the reader's (endProbe).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.reader.SetReadDeadline(t)
	return nil
}

func (c *Conn) SetDeadline(t time.Time) error {
	c.reader.SetReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// Close stops the reader where it waits for a Read, then closes the
// connection, which ends it where it waits for the socket.
func (c *Conn) Close() error {
	c.reader.Close()
	return c.Conn.Close()
}

// SyscallConn returns the socket's raw connection, for socket options:
// reading through it loses bytes.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// CloseWrite half-closes the connection.
func (c *Conn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }
