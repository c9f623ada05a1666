package client

import (
	"io"
	"testing"
	"time"
)

// TestIdleStreamCut: a stream that sends nothing for longer than the idle
// timeout is cut; one that keeps sending is not.
func TestIdleStreamCut(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	cut := make(chan struct{})
	const timeout = 500 * time.Millisecond
	ir := watchIdle(pr, timeout, func() { close(cut) })
	defer ir.stop()
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := ir.Read(buf); err != nil {
				return
			}
		}
	}()
	// Bytes every 20ms for three timeouts: never a timeout of silence, so
	// only the reads keep the stream from being cut.
	for sending := time.Now(); time.Since(sending) < 3*timeout; {
		pw.Write([]byte(": ping\n\n"))
		select {
		case <-cut:
			t.Fatal("a stream that keeps sending was cut as idle")
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("a silent stream was never cut")
	}
}
