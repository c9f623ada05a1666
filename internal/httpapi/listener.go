package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/sockio"
)

const (
	// maxRefusing bounds the connections being refused at once; past it an
	// excess connection is closed without a reply.
	maxRefusing = 64
	// refuseLinger bounds how long a refused connection is held to deliver
	// its 429.
	refuseLinger = time.Second
	// refusalLogEvery rate-limits the log line about refused connections.
	refusalLogEvery = 10 * time.Second
)

// limitListener accepts at most cap(slots) connections at once. One over the
// cap is answered 429 overloaded in the error envelope and closed, so the
// client sees why, rather than waiting in the accept queue.
type limitListener struct {
	net.Listener
	slots      chan struct{}
	refusing   chan struct{}
	maxHeaders int
	log        *slog.Logger
	refused    atomic.Uint64
	lastLog    atomic.Int64 // unix nanoseconds of the last refusal logged
}

func newLimitListener(ln net.Listener, maxConns, maxHeaders int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, maxConns),
		refusing: make(chan struct{}, maxRefusing), maxHeaders: maxHeaders, log: log}
}

// Accept returns the next connection under the cap, refusing those over it.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &apiConn{Conn: sockio.Wrap(c), release: func() { <-l.slots }, maxHeaders: l.maxHeaders}, nil
		default:
			l.refuse(c)
		}
	}
}

// refuse answers c 429 and closes it, without blocking Accept.
func (l *limitListener) refuse(c net.Conn) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastLog.Load(); now-last >= int64(refusalLogEvery) && l.lastLog.CompareAndSwap(last, now) {
		l.log.Warn("refusing client connections: at the connection limit (--max-connections)",
			"limit", cap(l.slots), "refused_total", n, "remote", c.RemoteAddr().String())
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		msg := fmt.Sprintf("too many connections: this server holds at most %d at once; retry with backoff", cap(l.slots))
		if _, err := c.Write(errorResponse(api.Errorf(api.CodeOverloaded, "%s", msg), "Retry-After: 1\r\n")); err != nil {
			return
		}
		// Half-close and read what the client sent, so closing does not reset
		// the connection before the client has read the reply.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// errorResponse is a whole HTTP/1.1 reply carrying e in the error envelope,
// closing the connection; extra holds more header lines.
func errorResponse(e *api.Error, extra string) []byte {
	body, _ := json.Marshal(api.ErrorBody{Error: *e})
	body = append(body, '\n')
	status := e.Code.Status()
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), extra, len(body), body)
}

// apiConn is an accepted client connection: it frees its slot when closed
// and turns net/http's plain-text replies to requests it could not parse
// (a garbage method, a malformed %-escape, oversized headers) into the
// JSON error envelope.
//
// A plain TCP connection is read and written through sockio: net/http
// starts two reads a request (the next request's, and one in the
// background while the handler runs), each of which would otherwise begin
// with a read(2) that finds the socket empty.
type apiConn struct {
	net.Conn
	release    func()
	once       sync.Once
	maxHeaders int
	// head is the start of the last read, where a request net/http refuses
	// usually begins: it lets the refusal say what is wrong.
	head []byte
}

// headLen is how much of each read apiConn keeps to explain a refusal.
const headLen = 512

func (c *apiConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.head = append(c.head[:0], p[:min(n, headLen)]...)
	}
	return n, err
}

func (c *apiConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, as net/http does after refusing
// oversized headers.
func (c *apiConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *apiConn) Write(p []byte) (int, error) {
	// c.head is read only for a refusal, when net/http reads no more: a
	// background read may be filling it while a handler's reply is written.
	if e := parseRawError(p, c.maxHeaders, func() []byte { return c.head }); e != nil {
		if _, err := c.Conn.Write(errorResponse(e, "")); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rawErrorHeaders follow the status line of every reply net/http writes by
// itself for a request it could not parse, and of no other reply: those
// carry a Date header, and sort Connection before Content-Type.
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// parseRawError recognises one of net/http's own plain-text error replies
// and returns its equivalent API error, or nil; head returns the start of
// the refused request, if known.
func parseRawError(p []byte, maxHeaders int, head func() []byte) *api.Error {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return nil
	}
	end := bytes.IndexByte(rest, '\r')
	if end < 3 || !bytes.HasPrefix(rest[end:], []byte(rawErrorHeaders)) {
		return nil // not one: checked in the status line's length, not the reply's
	}
	line, body := rest[:end], rest[end+len(rawErrorHeaders):]
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil {
		return nil
	}
	switch status {
	case http.StatusBadRequest:
		detail := requestLineProblem(head())
		if _, text, ok := bytes.Cut(body, []byte("Bad Request: ")); ok {
			detail = string(text)
		}
		return api.Errorf(api.CodeInvalidArgument, "malformed request: %s", detail)
	case http.StatusRequestHeaderFieldsTooLarge:
		return api.Errorf(api.CodeTooLarge, "request line and headers over %d bytes", maxHeaders)
	case http.StatusNotImplemented:
		return api.Errorf(api.CodeInvalidArgument, "malformed request: unsupported Transfer-Encoding")
	case http.StatusHTTPVersionNotSupported:
		return api.Errorf(api.CodeInvalidArgument, "malformed request: unsupported HTTP version (use HTTP/1.1)")
	}
	return nil
}

// requestLineProblem says what is wrong with the request line at the start
// of head, as net/http's generic 400 does not.
func requestLineProblem(head []byte) string {
	const unknown = "the request line or a header could not be parsed (an invalid method, a malformed %-escape or character in the URL, or a malformed header)"
	line, _, _ := bytes.Cut(head, []byte("\n"))
	method, rest, ok1 := strings.Cut(strings.TrimSuffix(string(line), "\r"), " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/") {
		return unknown
	}
	if method == "" || strings.IndexFunc(method, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Sprintf("invalid method %q", method)
	}
	if _, err := url.ParseRequestURI(target); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Sprintf("malformed URL %q: %v", target, err)
	}
	return unknown
}

// isTokenChar reports whether r may appear in an HTTP method (RFC 9110 token).
func isTokenChar(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}
