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
	ir := watchIdle(pr, time.Second, func() { close(cut) })
	defer ir.stop()
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := ir.Read(buf); err != nil {
				return
			}
		}
	}()
	for range 10 { // bytes every 20ms: never a second of silence
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
