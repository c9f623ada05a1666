package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// countingHandler counts processed messages and wakes a waiter at each batch boundary.
type countingHandler struct {
	processed atomic.Int64
	wake      chan struct{} // capacity 1
}

func (h *countingHandler) Process(ctx context.Context, group uint64, m raftpb.Message) error {
	h.processed.Add(1)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return nil
}

func (h *countingHandler) ReceivePeer(context.Context, uint64, PeerMessage) error      { return nil }
func (h *countingHandler) ReportUnreachable(group, id uint64)                          {}
func (h *countingHandler) ReportSnapshot(group, id uint64, status raft.SnapshotStatus) {}

// BenchmarkTCPMsgApp streams MsgApps of 8 entries of 256 bytes from one TCP
// transport to another on loopback. Like raft with MaxInflightMsgs, the
// sender keeps at most a window of messages unprocessed, so nothing is
// dropped. Reports msgs/s and MB/s of entry payload.
func BenchmarkTCPMsgApp(b *testing.B) {
	const window, batch = 1024, 64
	receiverHandler := &countingHandler{wake: make(chan struct{}, 1)}
	receiver := startNode(b, 2, 7, "127.0.0.1:0", func(cfg *Config) { cfg.Handler = receiverHandler })
	sender := startNode(b, 1, 7, "127.0.0.1:0", nil)
	sender.transport.AddPeer(2, receiver.addr())
	messages := make([]raftpb.Message, batch)
	for i := range messages {
		messages[i] = app(1, 2, uint64(i), 8, 256)
	}
	b.SetBytes(8 * 256)
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; sent += batch {
		for int64(sent)-receiverHandler.processed.Load() > window {
			<-receiverHandler.wake
		}
		n := min(batch, b.N-sent)
		sender.transport.Send(1, messages[:n])
	}
	for receiverHandler.processed.Load() < int64(b.N) {
		select {
		case <-receiverHandler.wake:
		case <-time.After(10 * time.Second):
			b.Fatalf("%d of %d messages arrived; stats %+v", receiverHandler.processed.Load(), b.N, sender.transport.Stats())
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if dropped := sender.transport.Stats().MessagesDropped; dropped != 0 {
		b.Fatalf("%d messages dropped", dropped)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
