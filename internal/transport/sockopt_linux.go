package transport

import (
	"syscall"
	"time"
)

// peerConnTimeout bounds how long data written to a peer may stay
// unacknowledged by its kernel before the connection fails (TCP_USER_TIMEOUT).
// Without it, a connection blackholed by a partition keeps retransmitting
// with exponential backoff for many minutes after the partition heals, and
// the peer hears nothing from us meanwhile.
const peerConnTimeout = 5 * time.Second

// controlPeerSocket sets TCP_USER_TIMEOUT on an outbound peer connection.
func controlPeerSocket(network, address string, c syscall.RawConn) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(peerConnTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return sockErr
}

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h.
const tcpUserTimeout = 0x12
