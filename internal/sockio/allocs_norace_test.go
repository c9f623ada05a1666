//go:build !race

package sockio

import (
	"io"
	"testing"
)

// TestWriteAllocatesNothing: a Write is on every reply's and raft frame's
// way out; it allocates no more than net.TCPConn's does.
func TestWriteAllocatesNothing(t *testing.T) {
	wrapped, peer := pair(t)
	go io.Copy(io.Discard, peer)
	reply := []byte("a reply")
	if allocs := testing.AllocsPerRun(200, func() { wrapped.Write(reply) }); allocs != 0 {
		t.Fatalf("%v allocations a Write, want 0", allocs)
	}
}

// TestRequestReplyAllocatesNothing: a request read through the reader and
// its reply written back allocate nothing (the chunk comes from the pool,
// the reading goroutine's function is bound once).
func TestRequestReplyAllocatesNothing(t *testing.T) {
	wrapped, peer := pair(t)
	go func() {
		buf := make([]byte, 4)
		for {
			if _, err := io.ReadFull(wrapped, buf); err != nil {
				return
			}
			if _, err := wrapped.Write(buf); err != nil {
				return
			}
		}
	}()
	ping, pong := []byte("ping"), make([]byte, 4)
	exchange := func() {
		if _, err := peer.Write(ping); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, pong); err != nil {
			t.Fatal(err)
		}
	}
	exchange() // the first chunk comes from the pool's New
	if allocs := testing.AllocsPerRun(200, exchange); allocs != 0 {
		t.Fatalf("%v allocations an exchange, want 0", allocs)
	}
}
