package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// received is one message handed to a Handler.
type received struct {
	group   uint64
	message raftpb.Message
}

// receivedPeer is one peer message handed to a Handler.
type receivedPeer struct {
	from    uint64
	message PeerMessage
}

// snapshotReport is one ReportSnapshot call.
type snapshotReport struct {
	group, id uint64
	status    raft.SnapshotStatus
}

// recorder is a Handler that records everything it is given.
type recorder struct {
	mu          sync.Mutex // guards the fields below
	messages    []received
	peers       []receivedPeer
	unreachable map[[2]uint64]int
	snapshots   []snapshotReport
	processErr  error         // returned by Process when set
	block       chan struct{} // if not nil, Process waits until it is closed or ctx ends
}

func newRecorder() *recorder { return &recorder{unreachable: make(map[[2]uint64]int)} }

func (r *recorder) Process(ctx context.Context, group uint64, m raftpb.Message) error {
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, received{group: group, message: m})
	return r.processErr
}

func (r *recorder) ReceivePeer(ctx context.Context, from uint64, m PeerMessage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers = append(r.peers, receivedPeer{from: from, message: m})
	return nil
}

// peerMessages returns the peer messages received, in arrival order.
func (r *recorder) peerMessages() []receivedPeer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedPeer(nil), r.peers...)
}

func (r *recorder) ReportUnreachable(group, id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[[2]uint64{group, id}]++
}

func (r *recorder) ReportSnapshot(group, id uint64, status raft.SnapshotStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots = append(r.snapshots, snapshotReport{group: group, id: id, status: status})
}

// from returns the messages received from node id, in arrival order.
func (r *recorder) from(id uint64) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, m := range r.messages {
		if m.message.From == id {
			out = append(out, m)
		}
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.messages)
}

func (r *recorder) unreachableCount(group, id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[[2]uint64{group, id}]
}

func (r *recorder) snapshotReports() []snapshotReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]snapshotReport(nil), r.snapshots...)
}

// hasMessage reports whether a message of type typ with index index arrived.
func (r *recorder) hasMessage(typ raftpb.MessageType, index uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.messages {
		if m.message.Type == typ && m.message.Index == index {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// generator is an io.Reader of size deterministic bytes that it makes up
// as it goes, so that a large body is never in memory.
type generator struct {
	remaining int64
	position  int64
}

func (g *generator) Read(p []byte) (int, error) {
	if g.remaining == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), g.remaining))
	for done := 0; done < n; {
		done += copy(p[done:n], pattern[(g.position+int64(done))%int64(len(pattern)):])
	}
	g.position += int64(n)
	g.remaining -= int64(n)
	return n, nil
}

// pattern is what generators repeat; its prime length keeps it unaligned with chunks.
var pattern = func() []byte {
	b := make([]byte, 65521)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}()

func (g *generator) Close() error { return nil }

// generatorCRC computes the crc32c of a generator's bytes.
func generatorCRC(size int64) uint32 {
	sum := crc32.New(castagnoli)
	io.CopyBuffer(sum, &generator{remaining: size}, make([]byte, 64<<10))
	return sum.Sum32()
}

// snapshotStore is a Snapshots whose bodies are generated and whose
// received bodies are checksummed and discarded.
type snapshotStore struct {
	size       int64
	openErr    error
	receiveErr error // returned by Receive after reading the body
	readLimit  int64 // if > 0, Receive reads only this many bytes and returns nil

	mu       sync.Mutex // guards the fields below
	received []receivedSnapshot
}

type receivedSnapshot struct {
	index uint64
	size  int64
	crc   uint32
	err   error // the body's read error, if any
}

func (s *snapshotStore) Open(group uint64, m raftpb.Message) (io.ReadCloser, int64, error) {
	if s.openErr != nil {
		return nil, 0, s.openErr
	}
	return &generator{remaining: s.size}, s.size, nil
}

func (s *snapshotStore) Receive(group uint64, m raftpb.Message, body io.Reader) error {
	if s.readLimit > 0 {
		body = io.LimitReader(body, s.readLimit)
	}
	sum := crc32.New(castagnoli)
	n, err := io.CopyBuffer(sum, body, make([]byte, 32<<10))
	s.mu.Lock()
	s.received = append(s.received, receivedSnapshot{index: m.Snapshot.Metadata.Index, size: n, crc: sum.Sum32(), err: err})
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("test store: %w", err)
	}
	return s.receiveErr
}

func (s *snapshotStore) receivedSnapshots() []receivedSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receivedSnapshot(nil), s.received...)
}

var errTest = errors.New("planted test error")

// testLogger logs to stderr when LATCH_TEST_LOG is set and discards otherwise.
func testLogger() *slog.Logger {
	if os.Getenv("LATCH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// node is a TCP transport under test with its handler and snapshot store.
type node struct {
	id        uint64
	transport *TCP
	handler   *recorder
	snapshots *snapshotStore
}

// startNode starts a transport for id in cluster on addr ("127.0.0.1:0" for any port).
func startNode(t testing.TB, id, cluster uint64, addr string, tune func(*Config)) *node {
	t.Helper()
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	n := &node{id: id, handler: newRecorder(), snapshots: &snapshotStore{}}
	cfg := Config{ID: id, ClusterID: cluster, Listener: listener, Handler: n.handler, Snapshots: n.snapshots,
		Logger: testLogger(), MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	n.transport, err = NewTCP(cfg)
	if err != nil {
		t.Fatalf("NewTCP: %v", err)
	}
	t.Cleanup(func() { n.transport.Close() })
	return n
}

func (n *node) addr() string { return n.transport.Addr().String() }

// connect makes every node a peer of every other.
func connect(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.transport.AddPeer(b.id, b.addr())
			}
		}
	}
}

// app returns a MsgApp from -> to carrying index and entries of size bytes each.
func app(from, to, index uint64, entries, size int) raftpb.Message {
	m := raftpb.Message{Type: raftpb.MsgApp, From: from, To: to, Term: 1, Index: index, Commit: index}
	for i := range entries {
		m.Entries = append(m.Entries, raftpb.Entry{Term: 1, Index: index + uint64(i), Data: make([]byte, size)})
	}
	return m
}

func newCRC() hash.Hash32 { return crc32.New(castagnoli) }

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

// corruptChunks encodes size generated bytes in 1000-byte chunks plus the
// terminator, applying corrupt to the second chunk.
func corruptChunks(t testing.TB, size int64, corrupt func([]byte)) io.Reader {
	t.Helper()
	var out bytes.Buffer
	total := newCRC()
	data := make([]byte, size)
	io.ReadFull(&generator{remaining: size}, data)
	for i := 0; len(data) > 0; i++ {
		n := min(1000, len(data))
		chunk := binary.BigEndian.AppendUint32(nil, uint32(n))
		chunk = binary.BigEndian.AppendUint32(chunk, crc32.Checksum(data[:n], castagnoli))
		chunk = append(chunk, data[:n]...)
		total.Write(data[:n])
		if i == 1 {
			corrupt(chunk)
		}
		out.Write(chunk)
		data = data[n:]
	}
	out.Write(binary.BigEndian.AppendUint32(make([]byte, 4), total.Sum32()))
	return &out
}
