package transport

import (
	"context"
	"syscall"
	"testing"
)

// TestPeerConnUserTimeout: a connection dialed to a peer carries
// TCP_USER_TIMEOUT, so a blackholed link fails in peerConnTimeout instead of
// retransmitting for minutes.
func TestPeerConnUserTimeout(t *testing.T) {
	a, b := startNode(t, 1, 7, "127.0.0.1:0", nil), startNode(t, 2, 7, "127.0.0.1:0", nil)
	conn, err := a.transport.dial(context.Background(), b.addr(), b.id, kindMessages)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		got, sockErr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
	}); err != nil {
		t.Fatal(err)
	}
	if sockErr != nil {
		t.Fatalf("getsockopt TCP_USER_TIMEOUT: %v", sockErr)
	}
	if want := int(peerConnTimeout.Milliseconds()); got != want {
		t.Errorf("TCP_USER_TIMEOUT is %d ms, want %d", got, want)
	}
}
