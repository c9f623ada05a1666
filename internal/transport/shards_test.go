package transport

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// lockedBuffer is a log destination safe for the transport's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTCPRefusesAnotherShardCount checks that a peer started with another
// shard count is refused at the handshake, nothing it sends is processed,
// and the refusal is logged naming both counts; a peer with the same count
// is served.
func TestTCPRefusesAnotherShardCount(t *testing.T) {
	var logs lockedBuffer
	receiver := startNode(t, 2, 7, "127.0.0.1:0", func(c *Config) {
		c.Shards = 4
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	sender := startNode(t, 1, 7, "127.0.0.1:0", func(c *Config) { c.Shards = 8 })
	sender.transport.AddPeer(2, receiver.addr())
	waitFor(t, 5*time.Second, "the sender to see the peer as unreachable", func() bool {
		sender.transport.Send(1, []raftpb.Message{app(1, 2, 1, 1, 8)})
		// The refusal is counted before it is logged: wait for both.
		return sender.handler.unreachableCount(1, 2) > 0 && receiver.transport.Stats().FramesRejected > 0 &&
			strings.Contains(logs.String(), "the peer runs with --shards 8, this member with --shards 4")
	})
	if n := receiver.handler.count(); n != 0 {
		t.Fatalf("receiver processed %d messages from a peer with another shard count", n)
	}
	if text := logs.String(); !strings.Contains(text, "the peer runs with --shards 8, this member with --shards 4") {
		t.Fatalf("the refusal's log does not name both shard counts:\n%s", text)
	}

	same := startNode(t, 3, 7, "127.0.0.1:0", func(c *Config) { c.Shards = 4 })
	same.transport.AddPeer(2, receiver.addr())
	waitFor(t, 5*time.Second, "a peer with the same shard count to be served", func() bool {
		same.transport.Send(1, []raftpb.Message{app(3, 2, 1, 1, 8)})
		return receiver.handler.count() > 0
	})
}

// TestHandshakeCarriesShardCount round-trips the shard count through the
// handshake's encoding.
func TestHandshakeCarriesShardCount(t *testing.T) {
	for _, shards := range []uint16{1, 4, 1024, 65535} {
		hello := handshake{version: protocolVersion, kind: kindMessages, shards: shards, cluster: 7, from: 1, to: 2}
		got, err := readHandshake(bytes.NewReader(hello.encode()))
		if err != nil || got != hello {
			t.Fatalf("shards %d: read back %+v, %v; want %+v", shards, got, err, hello)
		}
	}
}
