package sockio

import (
	"net"
	"os"
	"syscall"
	"time"
)

// Conn is a TCP connection read through a reader and written with raw
// system calls.
type Conn struct {
	net.Conn
	reader *reader
	raw    syscall.RawConn
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
	return &Conn{Conn: c, reader: newReader(tcp, raw), raw: raw}
}

// Write writes p whole, or fails, as net.Conn's does, with write(2) calls
// on the non-blocking socket (sysWrite); while the socket's buffer is full
// it waits in the netpoller, until the write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	written := 0
	var failed error
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			n, errno := sysWrite(int(fd), p[written:])
			switch errno {
			case 0:
				written += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				failed = os.NewSyscallError("write", errno)
				return true
			}
		}
		return true
	})
	if failed == nil {
		failed = err
	}
	if failed != nil {
		return written, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: failed}
	}
	return written, nil
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
