package sockread

import (
	"net"
	"time"
)

// Conn is a net.Conn read through a Reader; writes go to the connection as
// they are.
type Conn struct {
	net.Conn
	reader *Reader
}

// Wrap returns c read through a Reader if c is a plain TCP connection, and
// c itself otherwise (a TLS connection reads its records as it must).
// Reading c other than through the returned connection loses bytes.
func Wrap(c net.Conn) net.Conn {
	if _, plain := c.(*net.TCPConn); !plain {
		return c
	}
	r := New(c)
	if r == nil {
		return c
	}
	return &Conn{Conn: c, reader: r}
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

// CloseWrite half-closes the connection.
func (c *Conn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }
