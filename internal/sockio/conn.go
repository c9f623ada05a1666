package sockio

import (
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a net.Conn read through a Reader; writes go to the connection as
// they are.
type Conn struct {
	net.Conn
	reader *Reader
	raw    syscall.RawConn
}

// Wrap returns c read through a Reader if c is a plain TCP connection, and
// c itself otherwise (a TLS connection reads its records as it must).
// Reading c other than through the returned connection loses bytes.
func Wrap(c net.Conn) net.Conn {
	if _, plain := c.(*net.TCPConn); !plain {
		return c
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return c
	}
	r := New(c)
	if r == nil {
		return c
	}
	return &Conn{Conn: c, reader: r, raw: raw}
}

// Write writes p whole, or fails, as net.Conn's does, with raw write(2)
// calls on the non-blocking socket (see readNoEINTR); while the socket's
// buffer is full it waits in the netpoller, until the write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	written := 0
	var failed error
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[written])), uintptr(len(p)-written))
			switch errno {
			case 0:
				written += int(n)
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

// SetReadDeadline sets the Reader's deadline: the socket's own is never set.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.reader.SetReadDeadline(t)
	return nil
}

func (c *Conn) SetDeadline(t time.Time) error {
	c.reader.SetReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// Close stops the Reader, then closes the connection (which waits for the
// Reader's read of the socket to return, and ends it if it waits there).
func (c *Conn) Close() error {
	c.reader.Close()
	return c.Conn.Close()
}

// SyscallConn returns the socket's raw connection, for socket options:
// reading through it loses bytes.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// CloseWrite half-closes the connection.
func (c *Conn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }
