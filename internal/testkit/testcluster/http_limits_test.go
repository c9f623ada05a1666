package testcluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/httpapi"
)

// dialNode opens a TCP connection to node base's client port.
func dialNode(t *testing.T, base string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// closedWithin reports whether the server closes conn (a read returns EOF
// or a reset) within d, discarding whatever it sends first.
func closedWithin(conn net.Conn, d time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestSlowBodiesTimedOut (issue 11 item 6): connections that send their
// request body a byte at a time are answered 400 once the body deadline
// passes and closed, instead of staying open for ever.
func TestSlowBodiesTimedOut(t *testing.T) {
	c := New(t, 1, Steady(Options{HTTPLimits: httpapi.Limits{BodyTimeout: 500 * time.Millisecond}}))
	const conns = 30
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		conn := dialNode(t, c.URL(0))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- slowPut(conn, fmt.Sprintf("/v1/kv/slow%d", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n, err := Get(ctxT(t, 10*time.Second), c.URL(0), "/slow0", api.Linearizable); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("read of /slow0: %+v, %v; want not_found: a body that never arrived must not be stored", n, err)
	}
}

// slowPut sends a PUT whose 1000-byte body comes one byte every 100 ms and
// checks the server answers 400 invalid_argument and closes the connection
// within 10 s.
func slowPut(conn net.Conn, path string) error {
	if _, err := fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path); err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	reader := bufio.NewReader(conn)
	resp, err := http.ReadResponse(reader, nil)
	if err != nil {
		return fmt.Errorf("%s: no reply to a slow body: %w", path, err)
	}
	var e api.ErrorBody
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if json.Unmarshal(body, &e) != nil || resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "not received within 500ms") {
		return fmt.Errorf("%s: slow body answered %d %s; want 400 body not received within 500ms", path, resp.StatusCode, body)
	}
	// The read deadline set above still bounds this read: timing out on it
	// means the connection stayed open as surely as a byte arriving does.
	var ne net.Error
	if _, err := reader.ReadByte(); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%s: the connection stayed open after a timed-out body (read: %v)", path, err)
	}
	return nil
}

// TestHeaderAndIdleTimeouts (issue 11 item 6): a connection whose headers
// never complete, and a keep-alive connection left idle, are closed.
func TestHeaderAndIdleTimeouts(t *testing.T) {
	c := New(t, 1, Steady(Options{HTTPLimits: httpapi.Limits{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}}))
	partial := dialNode(t, c.URL(0))
	if _, err := io.WriteString(partial, "GET /v1/status HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(partial, 10*time.Second) {
		t.Error("a connection with half its headers stayed open for 10s")
	}
	idle := dialNode(t, c.URL(0))
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	reader := bufio.NewReader(idle)
	resp, err := http.ReadResponse(reader, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := reader.ReadByte(); err == nil {
		t.Error("server sent bytes on an idle connection")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Error("an idle keep-alive connection stayed open for 10s")
	}
}

// TestConnectionCap (issue 11 item 6): a listener holds at most
// --max-connections connections; one more is answered 429 overloaded in the
// error envelope and closed, and once connections close new ones are served.
func TestConnectionCap(t *testing.T) {
	const limit = 4
	c := New(t, 1, Steady(Options{HTTPLimits: httpapi.Limits{MaxConnections: limit}}))
	var held []net.Conn
	refused := false
	for range limit + 1 {
		conn := dialNode(t, c.URL(0))
		status, body := exchangeKeepAlive(t, conn)
		switch status {
		case http.StatusOK:
			held = append(held, conn)
		case http.StatusTooManyRequests:
			var e api.ErrorBody
			if json.Unmarshal(body, &e) != nil || e.Error.Code != api.CodeOverloaded || !strings.Contains(e.Error.Message, "at most 4") {
				t.Fatalf("refused connection answered %s", body)
			}
			if !closedWithin(conn, 10*time.Second) {
				t.Fatal("a refused connection stayed open")
			}
			refused = true
		default:
			t.Fatalf("status %d %s", status, body)
		}
	}
	if !refused || len(held) > limit {
		t.Fatalf("%d connections served at once, none refused; the limit is %d", len(held), limit)
	}
	for _, conn := range held {
		conn.Close()
	}
	if !waitFor(10*time.Second, func() bool {
		status, _ := exchangeKeepAlive(t, dialNode(t, c.URL(0)))
		return status == http.StatusOK
	}) {
		t.Fatal("no connection served after the held ones closed")
	}
}

// exchangeKeepAlive sends GET /healthz on conn, leaving it open, and returns
// the reply's status and body.
func exchangeKeepAlive(t *testing.T, conn net.Conn) (int, []byte) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestLongPollsOutliveDeadlines (issue 11 item 6): the body and write
// deadlines do not cut a request that waits (a lock acquire with wait_ms)
// or an event stream that is quiet for longer than them.
func TestLongPollsOutliveDeadlines(t *testing.T) {
	limits := httpapi.Limits{BodyTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	c := New(t, 1, Steady(Options{HTTPLimits: limits}))
	ctx := ctxT(t, 30*time.Second)
	base := c.URL(0)
	holder := createSession(t, ctx, base, 20*time.Second)
	waiter := createSession(t, ctx, base, 20*time.Second)
	if err := Do(ctx, "POST", base, "/v1/lock/acquire", nil, api.LockRequest{Name: "l", SessionID: holder.SessionID}, nil); err != nil {
		t.Fatal(err)
	}
	stream, err := OpenEventStream(base, waiter.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := AddWatch(ctx, base, api.WatchRequest{Path: "/watched", SessionID: waiter.SessionID}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = Do(ctx, "POST", base, "/v1/lock/acquire", nil, api.LockRequest{Name: "l", SessionID: waiter.SessionID, WaitMs: 1500}, nil)
	if api.CodeOf(err) != api.CodeLockNotHeld || time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("acquire waiting 1.5s past 200ms deadlines: %v after %v; want lock_not_held after the wait", err, time.Since(start))
	}
	if _, err := Put(ctx, base, "/watched", "x", ""); err != nil {
		t.Fatal(err)
	}
	if ev, ok := stream.Next(10 * time.Second); !ok || ev.Path != "/watched" {
		t.Fatalf("stream quiet for 1.5s past a 200ms write deadline: event %+v, %v (end: %s)", ev, ok, stream.Reason())
	}
}
