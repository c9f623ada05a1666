package httpapi

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// Limits bound every phase of a client request and the connections one
// listener holds, so slow or idle clients cannot pin a server's resources.
// The zero value of a field takes its default (DefaultLimits).
type Limits struct {
	// HeaderTimeout bounds reading a request's line and headers, from the
	// connection's accept or its first byte after an idle keep-alive.
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from the start of the
	// request's handling. A body not received in time is refused with 400 and
	// the connection is closed.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of a reply: a reply must be taken by the
	// client within this long of its last write. A request that waits (a lock
	// acquire with wait_ms, a read with min_index) is not bounded by it while
	// it waits, and an event stream gets it afresh with every event and ping.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its next
	// request.
	IdleTimeout time.Duration
	// MaxConnections caps the open client connections of one listener. A
	// connection over the cap is answered 429 overloaded and closed.
	MaxConnections int
	// MaxHeaderBytes bounds a request's line and headers; larger ones are
	// answered 413 too_large.
	MaxHeaderBytes int
}

// DefaultLimits are latchd's default limits.
func DefaultLimits() Limits {
	return Limits{
		HeaderTimeout:  10 * time.Second,
		BodyTimeout:    30 * time.Second,
		WriteTimeout:   30 * time.Second,
		IdleTimeout:    5 * time.Minute,
		MaxConnections: 4096,
		MaxHeaderBytes: 64 << 10,
	}
}

// withDefaults returns l with each zero field set to its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.HeaderTimeout, d.HeaderTimeout)
	set(&l.BodyTimeout, d.BodyTimeout)
	set(&l.WriteTimeout, d.WriteTimeout)
	set(&l.IdleTimeout, d.IdleTimeout)
	if l.MaxConnections == 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// AddFlags defines latchd's flags for l on fs, with l's values as defaults.
func (l *Limits) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.HeaderTimeout, "http-header-timeout", l.HeaderTimeout, "deadline for reading a request's line and headers")
	fs.DurationVar(&l.BodyTimeout, "http-body-timeout", l.BodyTimeout, "deadline for reading a request's body")
	fs.DurationVar(&l.WriteTimeout, "http-write-timeout", l.WriteTimeout, "deadline for a client to take each write of a reply or event stream")
	fs.DurationVar(&l.IdleTimeout, "http-idle-timeout", l.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections, "open client connections, on each client port (HTTP, ZooKeeper); more are refused and closed")
}

// Validate reports the first limit that is not positive, naming its flag.
func (l Limits) Validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"http-header-timeout", l.HeaderTimeout}, {"http-body-timeout", l.BodyTimeout},
		{"http-write-timeout", l.WriteTimeout}, {"http-idle-timeout", l.IdleTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("--%s must be positive, not %v", d.flag, d.v)
		}
	}
	if l.MaxConnections < 1 {
		return fmt.Errorf("--max-connections must be at least 1, not %d", l.MaxConnections)
	}
	return nil
}

// Server is an http.Server that applies Limits; Serve wraps its listener
// with the connection cap.
type Server struct {
	*http.Server
	limits Limits
	log    *slog.Logger
}

// NewServer returns the server of h (the client API, perhaps with more
// routes beside it) under limits; zero limits take their defaults.
func NewServer(h http.Handler, limits Limits, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	limits = limits.withDefaults()
	return &Server{
		Server: &http.Server{
			Handler:           withDeadlines(h, limits),
			ReadHeaderTimeout: limits.HeaderTimeout,
			IdleTimeout:       limits.IdleTimeout,
			MaxHeaderBytes:    limits.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			ConnContext:       withTLSConn,
		},
		limits: limits,
		log:    log,
	}
}

// Serve serves connections from ln, at most Limits.MaxConnections at once,
// until the server is shut down. ln may be a TLS listener
// (tlsconfig.WrapListener): the limits then apply to the decrypted stream,
// and a verified client certificate's name reaches the handler (CallerFrom).
func (s *Server) Serve(ln net.Listener) error {
	return s.Server.Serve(newLimitListener(ln, s.limits.MaxConnections, s.limits.MaxHeaderBytes, s.log))
}

// withDeadlines bounds the body read and each reply write of every request
// (the header read and the idle wait are the http.Server's). It sets no
// deadline while a handler waits, so long polls and streams are not cut.
func withDeadlines(next http.Handler, l Limits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{}) // the previous reply's on this connection
		if r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(time.Now().Add(l.BodyTimeout))
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, limit: l.BodyTimeout}
		}
		next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, timeout: l.WriteTimeout}, r)
		_ = rc.SetWriteDeadline(time.Now().Add(l.WriteTimeout)) // the final flush
	})
}

// bodyTimeoutError is the error of a body read past Limits.BodyTimeout.
type bodyTimeoutError struct{ limit time.Duration }

func (e *bodyTimeoutError) Error() string {
	return fmt.Sprintf("request body not received within %v", e.limit)
}

// deadlineBody lifts the body's read deadline once the body is read, so the
// server's watch for a closed connection does not expire while the handler
// waits, and reports a read past the deadline as a *bodyTimeoutError.
type deadlineBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	limit time.Duration
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var ne net.Error
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return n, &bodyTimeoutError{limit: b.limit}
	case !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// deadlineWriter gives every write and flush of a reply that can reach the
// connection at least WriteTimeout to reach the client, so an event
// stream's deadline moves with its events. Writes that only fill net/http's
// buffer do not move it (a small reply is sent by the flush after the
// handler, under withDeadlines' final deadline): a deadline costs a timer
// update, and most replies are one small write. Nor does a flush while the
// deadline set last is still WriteTimeout or more away: a deadline is set a
// quarter of WriteTimeout further than needed, so a stream busy with events
// moves it once every quarter WriteTimeout, not once an event (a timer
// update was 7% of the members' CPU in a fan-out to 10,000 streams). A
// client thus has from WriteTimeout to 1.25 WriteTimeout to take a write.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	// buffered counts the bytes written since the deadline last moved; at
	// unbufferedWrite or more a write may reach the connection.
	buffered int
	// deadline is the write deadline set last (zero: none set here).
	deadline time.Time
}

// deadlineSlack is how much further than WriteTimeout a deadline is set,
// as a fraction of it.
const deadlineSlack = 4 // a quarter

// unbufferedWrite is a size of writes below which net/http's buffers (2 KiB
// before a reply is chunked, 4 KiB on the connection) hold them.
const unbufferedWrite = 1024

func (w *deadlineWriter) extend() {
	w.buffered = 0
	now := time.Now()
	if w.deadline.Sub(now) >= w.timeout {
		return // still far enough
	}
	w.deadline = now.Add(w.timeout + w.timeout/deadlineSlack)
	_ = w.rc.SetWriteDeadline(w.deadline)
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code) // buffered until the first flush
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.buffered += len(p); w.buffered >= unbufferedWrite {
		w.extend()
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *deadlineWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
