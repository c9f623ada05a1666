package sockio

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock)")

// pair returns the two ends of a loopback TCP connection, the first read
// through Wrap.
func pair(t *testing.T) (wrapped, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	wrapped = Wrap(server)
	if _, ok := wrapped.(*Conn); !ok {
		t.Fatalf("Wrap of a TCP connection gave a %T", wrapped)
	}
	t.Cleanup(func() { wrapped.Close(); dialed.Close() })
	return wrapped, dialed
}

// readAsync starts a Read of one byte from c and returns where its error
// goes.
func readAsync(c net.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	return done
}

// awaitRead returns the error of a Read readAsync started, which what
// should end; the test fails if it has not ended within 10 s.
func awaitRead(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not end the waiting read", what)
		return nil
	}
}

func TestBytesArriveInOrderThenEOF(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	wrapped, peer := pair(t)
	sent := make([]byte, 3*chunkSize+rng.IntN(chunkSize))
	for i := range sent {
		sent[i] = byte(rng.Uint32())
	}
	go func() {
		rest := sent
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(2*chunkSize))
			if _, err := peer.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		peer.Close()
	}()
	var got bytes.Buffer
	buf := make([]byte, 1000) // smaller than a chunk: chunks are read in parts
	for {
		n, err := wrapped.Read(buf)
		got.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got.Len(), err)
		}
	}
	if !bytes.Equal(got.Bytes(), sent) {
		t.Fatalf("read %d bytes, not the %d sent in order", got.Len(), len(sent))
	}
	if n, err := wrapped.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read after EOF: %d, %v; want 0, EOF", n, err)
	}
}

func TestDeadlineEndsTheWaitNotTheRead(t *testing.T) {
	wrapped, peer := pair(t)
	wrapped.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 16)
	n, err := wrapped.Read(buf)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %d, %v; want 0 and a timeout", n, err)
	}
	// The bytes sent after the deadline go to the next read.
	if _, err := peer.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	wrapped.SetReadDeadline(time.Time{})
	if n, err := io.ReadFull(wrapped, buf[:5]); err != nil || string(buf[:n]) != "after" {
		t.Fatalf("read after the deadline was cleared: %q, %v", buf[:n], err)
	}
}

func TestDeadlineInThePastWakesAWaitingRead(t *testing.T) {
	wrapped, _ := pair(t)
	done := readAsync(wrapped)
	// Whether the read is waiting yet or not, a deadline in the past ends
	// it, as net/http's abort of its background read needs.
	wrapped.SetReadDeadline(time.Unix(1, 0))
	if err := awaitRead(t, done, "a deadline in the past"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read ended with %v, want a deadline error", err)
	}
}

func TestDeadlineMovedLaterKeepsTheReadWaiting(t *testing.T) {
	wrapped, peer := pair(t)
	wrapped.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	wrapped.SetReadDeadline(time.Now().Add(time.Hour)) // the first timer must not end the read
	go func() {
		time.Sleep(50 * time.Millisecond) // past the first deadline
		peer.Write([]byte("x"))
	}()
	buf := make([]byte, 1)
	if n, err := wrapped.Read(buf); n != 1 || err != nil {
		t.Fatalf("read: %d, %v; want the byte sent after the replaced deadline", n, err)
	}
}

func TestCloseEndsAWaitingReadAndTheReader(t *testing.T) {
	before := runtime.NumGoroutine()
	wrapped, _ := pair(t)
	done := readAsync(wrapped)
	wrapped.Close()
	if err := awaitRead(t, done, "Close"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read ended with %v, want net.ErrClosed", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the connection", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNoEmptyReadsInRequestReply is why the package exists: a connection
// whose peer sends only after it got an answer is read without a read(2)
// that finds the socket empty, where a plain Go reader makes one a message.
func TestNoEmptyReadsInRequestReply(t *testing.T) {
	var reads, empty atomic.Int64
	readSocket = func(fd int, p []byte) (int, error) {
		n, err := readNoEINTR(fd, p)
		reads.Add(1)
		if errors.Is(err, syscall.EAGAIN) {
			empty.Add(1)
		}
		return n, err
	}
	t.Cleanup(func() { readSocket = readNoEINTR })
	wrapped, peer := pair(t)
	const exchanges = 200
	go func() {
		buf := make([]byte, 4)
		for range exchanges {
			if _, err := io.ReadFull(wrapped, buf); err != nil {
				return
			}
			if _, err := wrapped.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 4)
	for i := range exchanges {
		if _, err := peer.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
	}
	// A readiness the netpoller reports for bytes already read (two
	// segments read at once) costs one empty read; nothing else does.
	if e := empty.Load(); e > exchanges/20 {
		t.Fatalf("%d of %d reads found the socket empty in %d exchanges", e, reads.Load(), exchanges)
	}
	t.Logf("%d reads, %d found the socket empty, in %d exchanges", reads.Load(), empty.Load(), exchanges)
}

func TestWrapLeavesOtherConnectionsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap of a %T gave a %T, want it unchanged", a, got)
	}
}

// TestCloseWithBytesUnread: bytes arrived that nobody asked for, so the
// reader's goroutine waits for a want inside its read of the socket, which
// the socket's Close waits for.
func TestCloseWithBytesUnread(t *testing.T) {
	wrapped, peer := pair(t)
	if _, err := peer.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // not needed for the outcome: lets the bytes arrive first
	closed := make(chan error, 1)
	go func() { closed <- wrapped.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a connection with bytes unread did not return")
	}
}

// TestEndThatCameWithData: the peer's end arrives with its last bytes, so
// the read that takes them uses the readiness that announced both; the end
// is still seen, by the read endProbe after.
func TestEndThatCameWithData(t *testing.T) {
	wrapped, peer := pair(t)
	if _, err := peer.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	time.Sleep(10 * time.Millisecond) // not needed for the outcome: lets the end arrive with the bytes
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := io.ReadFull(wrapped, buf[:4])
		if err != nil || string(buf[:n]) != "last" {
			done <- fmt.Errorf("read %q, %v; want the last bytes", buf[:n], err)
			return
		}
		_, err = wrapped.Read(buf)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("after the last bytes: %v, want EOF", err)
		}
	case <-time.After(10 * endProbe):
		t.Fatal("the end that came with the last bytes was never seen")
	}
}

func TestWritesWholeOrUntilTheDeadline(t *testing.T) {
	wrapped, peer := pair(t)
	// Buffers of a set size (the kernel then does not grow them, as it
	// may to several MiB on loopback): 8 MiB is far more than they hold.
	if err := wrapped.(*Conn).Conn.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := peer.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	if n, err := wrapped.Write(big); n != len(big) || err != nil {
		t.Fatalf("write: %d, %v; want %d, nil", n, err, len(big))
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer read %d bytes, not the %d written in order", len(b), len(big))
	}
	// Nobody reads now: the write fills the buffers and stops at its deadline.
	wrapped.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := wrapped.Write(big)
	var ne net.Error
	if n >= len(big) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write nobody reads: %d, %v; want part of it and a timeout", n, err)
	}
}

// TestReadAfterTheSocketWasClosedUnderneath: a socket closed other than
// through the Conn ends a Read with an error, not a wait, also when the
// reading goroutine saw the close before the Read asked.
func TestReadAfterTheSocketWasClosedUnderneath(t *testing.T) {
	wrapped, peer := pair(t)
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(wrapped, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// The reading goroutine now waits for the socket (after a read that
	// emptied it), asked for nothing.
	wrapped.(*Conn).Conn.Close()
	time.Sleep(10 * time.Millisecond) // not needed for the outcome: lets the goroutine end first
	if err := awaitRead(t, readAsync(wrapped), "the socket's close underneath"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read: %v, want net.ErrClosed", err)
	}
}
