//go:build !linux

package transport

import "syscall"

// controlPeerSocket leaves the socket as it is where TCP_USER_TIMEOUT does not exist.
func controlPeerSocket(network, address string, c syscall.RawConn) error { return nil }
