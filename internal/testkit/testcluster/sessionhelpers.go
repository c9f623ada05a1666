package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// Helpers for the session, exactly-once and watch scenarios of issue 4:
// bare HTTP calls (no retries, so a test sees what one node answers) and a
// reader of a session's Server-Sent Events stream.

// Steady returns opts with an election timeout long enough (500ms at the
// default tick) that a loaded 2-core machine running tests under -race does
// not change leaders by accident: the scenarios here change them on purpose.
func Steady(opts Options) Options {
	if opts.ElectionTicks == 0 {
		opts.ElectionTicks = 50
	}
	return opts
}

// CreateSession creates a session through node base and returns it as the
// server answered (the timeout it chose included).
func CreateSession(ctx context.Context, base string, timeout time.Duration) (api.Session, error) {
	var s api.Session
	err := Do(ctx, http.MethodPost, base, "/v1/session/create", nil,
		api.SessionCreateRequest{TimeoutMs: uint64(timeout.Milliseconds())}, &s)
	return s, err
}

// Heartbeat sends one heartbeat for ids to node base: the single form for
// one id, the batched session_ids form for more.
func Heartbeat(ctx context.Context, base string, ids ...string) (api.Heartbeat, error) {
	request := api.SessionRequest{SessionIDs: ids}
	if len(ids) == 1 {
		request = api.SessionRequest{SessionID: ids[0]}
	}
	var hb api.Heartbeat
	err := Do(ctx, http.MethodPost, base, "/v1/session/heartbeat", nil, request, &hb)
	return hb, err
}

// SessionInfo reads a session on node base at the given consistency; with
// minIndex > 0 a stale read first waits until the node applied minIndex.
func SessionInfo(ctx context.Context, base, id, consistency string, minIndex uint64) (api.Session, error) {
	var s api.Session
	err := Do(ctx, http.MethodGet, base, "/v1/session/"+id, readQuery(consistency, minIndex), nil, &s)
	return s, err
}

// GetAt reads path on node base at consistency, waiting for minIndex first.
func GetAt(ctx context.Context, base, path, consistency string, minIndex uint64) (api.Node, error) {
	var n api.Node
	err := Do(ctx, http.MethodGet, base, "/v1/kv"+path, readQuery(consistency, minIndex), nil, &n)
	return n, err
}

// ChildrenAt lists path's children on node base, waiting for minIndex first.
func ChildrenAt(ctx context.Context, base, path, consistency string, minIndex uint64) (api.Children, error) {
	q := readQuery(consistency, minIndex)
	q.Set("children", "true")
	var ch api.Children
	err := Do(ctx, http.MethodGet, base, "/v1/kv"+path, q, nil, &ch)
	return ch, err
}

func readQuery(consistency string, minIndex uint64) url.Values {
	q := url.Values{"consistency": {consistency}}
	if minIndex > 0 {
		q.Set("min_index", strconv.FormatUint(minIndex, 10))
	}
	return q
}

// SessionWrite says how a PUT or DELETE is tied to a session.
type SessionWrite struct {
	SessionID  string
	RequestSeq uint64 // 0: not exactly-once
	Ephemeral  bool
	Sequential bool
}

func (w SessionWrite) query() url.Values {
	q := url.Values{}
	if w.SessionID != "" {
		q.Set("session_id", w.SessionID)
	}
	if w.RequestSeq != 0 {
		q.Set("request_seq", strconv.FormatUint(w.RequestSeq, 10))
	}
	if w.Ephemeral {
		q.Set("ephemeral", "true")
	}
	if w.Sequential {
		q.Set("sequential", "true")
	}
	return q
}

// SessionPut writes value at path on node base as w says.
func SessionPut(ctx context.Context, base, path, value string, w SessionWrite) (api.Node, error) {
	var n api.Node
	err := Do(ctx, http.MethodPut, base, "/v1/kv"+path, w.query(), api.PutRequest{Value: value}, &n)
	return n, err
}

// SessionDelete deletes path on node base as w says.
func SessionDelete(ctx context.Context, base, path string, w SessionWrite) (api.Deleted, error) {
	var d api.Deleted
	err := Do(ctx, http.MethodDelete, base, "/v1/kv"+path, w.query(), nil, &d)
	return d, err
}

// AddWatch registers a watch on node base.
func AddWatch(ctx context.Context, base string, request api.WatchRequest) (api.Watch, error) {
	var w api.Watch
	err := Do(ctx, http.MethodPost, base, "/v1/watch", nil, request, &w)
	return w, err
}

// EventStream reads one session's event stream from one node on its own
// goroutine. Events arrive on Events in stream order; when the stream ends
// Events is closed and Reason says why (the server's "event: end" reason,
// or the read error).
type EventStream struct {
	Events <-chan api.Event
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // guards reason
	reason string
}

// OpenEventStream opens GET /v1/session/{id}/events on node base and waits
// for the reply headers, so that the stream is attached when it returns.
func OpenEventStream(base, session string) (*EventStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/session/"+session+"/events", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	response, err := streamClient.Do(request)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open event stream of %s on %s: %w", session, base, err)
	}
	if response.StatusCode != http.StatusOK {
		response.Body.Close()
		cancel()
		return nil, fmt.Errorf("open event stream of %s on %s: status %d", session, base, response.StatusCode)
	}
	events := make(chan api.Event, 1<<16)
	s := &EventStream{Events: events, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(events)
		defer response.Body.Close()
		s.setReason(readSSE(response.Body, func(ev api.Event) { events <- ev }))
	}()
	return s, nil
}

// streamClient has no overall timeout: streams last as long as a test wants.
var streamClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// readSSE parses Server-Sent Events, passing each to deliver, until the
// stream ends, and returns why: the data of an "end" event, or the read error.
func readSSE(body io.Reader, deliver func(api.Event)) string {
	scanner := bufio.NewScanner(body)
	scanner.Buffer(make([]byte, 0, 4096), 1<<20)
	kind := ""
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if kind == "end" {
				var end struct {
					Reason string `json:"reason"`
				}
				_ = json.Unmarshal([]byte(data), &end)
				return "end: " + end.Reason
			}
			var ev api.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return fmt.Sprintf("bad event %q: %v", data, err)
			}
			deliver(ev)
		case line == "":
			kind = ""
		}
	}
	if err := scanner.Err(); err != nil {
		return "read error: " + err.Error()
	}
	return "closed without an end event"
}

func (s *EventStream) setReason(reason string) {
	s.mu.Lock()
	s.reason = reason
	s.mu.Unlock()
}

// Reason says why the stream ended; empty while it runs.
func (s *EventStream) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Close ends the stream from the client side and waits for its reader.
func (s *EventStream) Close() {
	s.cancel()
	<-s.done
}

// Next returns the next event, or false if the stream ended or timeout passed.
func (s *EventStream) Next(timeout time.Duration) (api.Event, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ev, ok := <-s.Events:
		return ev, ok
	case <-timer.C:
		return api.Event{}, false
	}
}

// StuckStream is a session's event stream that nobody reads: the request is
// sent on a TCP connection with a small receive buffer, the reply headers
// are read, and nothing more until Drain, so the server's writes soon block.
type StuckStream struct {
	conn     net.Conn
	response *http.Response
}

// OpenStuckStream opens session's event stream on node base, waits for the
// reply headers (the stream is then attached) and reads nothing more.
func OpenStuckStream(base, session string) (*StuckStream, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u.Host, err)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetReadBuffer(4096)
	}
	request := fmt.Sprintf("GET /v1/session/%s/events HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", session, u.Host)
	if _, err := conn.Write([]byte(request)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("send the events request: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// A small buffer: the headers, and as little of the body as possible.
	response, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read the events reply: %w", err)
	}
	if response.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("events reply: status %d", response.StatusCode)
	}
	return &StuckStream{conn: conn, response: response}, nil
}

// Drain reads what the server sent, until the stream ends or timeout
// passes, and returns the number of events and the end reason.
func (s *StuckStream) Drain(timeout time.Duration) (events int, reason string, err error) {
	defer s.conn.Close()
	if err := s.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, "", err
	}
	end := readSSE(s.response.Body, func(api.Event) { events++ })
	if reason, ok := strings.CutPrefix(end, "end: "); ok {
		return events, reason, nil
	}
	return events, "", fmt.Errorf("after %d events the stream ended without a reason: %s", events, end)
}

// Close drops the connection.
func (s *StuckStream) Close() { s.conn.Close() }
