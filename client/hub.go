package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
)

// watchHub runs a session's event stream and the registrations of its
// watches. One goroutine (run) owns the connection: it opens the stream on
// one server, waits for its reply headers (the server has attached the
// stream then), registers every watch there (watches are server-local, and
// a server accepts them only for a session whose stream it has attached),
// and when the stream ends, or the server refuses a registration for want
// of the stream, picks a server again after a delay and re-registers every
// watch that has not fired, with its known index. A reader goroutine per
// connection parses the stream and dispatches events by watch_id.
type watchHub struct {
	session *Session
	kick    chan struct{} // capacity 1: a watcher waits to be registered

	mu sync.Mutex // guards the fields below and the hub fields of every Watcher
	// watchers are the live watchers, oldest first.
	watchers []*Watcher
	// gen numbers connections; events of an older one are ignored.
	gen uint64
	// byID maps the current connection's watch ids to their watchers.
	byID map[string]*Watcher
	// dead are ids of the current connection whose watchers ended or fired:
	// their later events are dropped, not kept as orphans.
	dead map[string]bool
	// endpoint is the server of the current connection.
	endpoint string
	// staleEndpoint and staleIDs are the server of the previous connection
	// and the watch ids it may still hold: a server keeps a session's
	// watches when a stream merely closes, so they are cancelled, and their
	// events ignored, if the hub reconnects there.
	staleEndpoint string
	staleIDs      []string
	// orphans are events whose watch id is not known yet: the reply to its
	// registration is still on the way. Bounded by maxOrphans.
	orphans []api.Event
	// lastStreamIndex is, per shard, the index of the newest event of that
	// shard on this connection. The stream is in index order per shard, so
	// every event of the shard for a watch registered there below it, up to
	// it, has arrived.
	lastStreamIndex map[int]uint64
	// closedErr is set when the session ended; no watcher is added after.
	closedErr error

	// refusals counts the connections in a row that ended with errNoStream;
	// owned by run.
	refusals int
}

// maxOrphans bounds the events kept for registrations still in flight.
const maxOrphans = 1024

// healthyStream is how long a stream must have lasted for its end to be
// followed by a jittered reconnect rather than a growing backoff.
const healthyStream = time.Second

// errNoStream: the server refused a registration because the session's
// stream is not attached there (it ended it, or a newer stream replaced it,
// before the registration arrived). The hub opens the stream again and
// registers everything anew, with known indexes.
var errNoStream = errors.New("client: the server has no event stream of the session for the watch")

// maxNoStreamRefusals bounds the connections in a row whose registration
// was refused with errNoStream: past it the watcher being registered ends
// with the server's error (something between the client and the servers,
// like a load balancer, sends the stream and the registrations to
// different members), rather than reconnecting forever.
const maxNoStreamRefusals = 5

func newWatchHub(s *Session) *watchHub {
	return &watchHub{session: s, kick: make(chan struct{}, 1), byID: map[string]*Watcher{}, dead: map[string]bool{},
		lastStreamIndex: map[int]uint64{}}
}

// add queues w for registration; it fails once the session has ended.
func (h *watchHub) add(w *Watcher) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closedErr != nil {
		return h.closedErr
	}
	h.watchers = append(h.watchers, w)
	h.kickLocked()
	return nil
}

func (h *watchHub) kickLocked() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// removeLocked forgets w, which has ended.
func (h *watchHub) removeLocked(w *Watcher) {
	for i, other := range h.watchers {
		if other == w {
			h.watchers = append(h.watchers[:i], h.watchers[i+1:]...)
			break
		}
	}
	h.forgetIDLocked(w)
}

// forgetIDLocked detaches w from its watch id on the current connection;
// a persistent watch that ended early is cancelled on the server.
func (h *watchHub) forgetIDLocked(w *Watcher) {
	if w.watchID == "" {
		return
	}
	delete(h.byID, w.watchID)
	h.dead[w.watchID] = true
	if w.ended && w.opts.persistent {
		go h.cancelRemote(h.endpoint, []string{w.watchID})
	}
	w.watchID = ""
}

// cancelRemote cancels watch ids on endpoint (DELETE /v1/watch/{id}), best
// effort: a watch left behind only costs the server until the session ends.
func (h *watchHub) cancelRemote(endpoint string, ids []string) {
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), h.session.client.cfg.RequestTimeout)
		cl := &call{method: "DELETE", path: "/v1/watch/" + url.PathEscape(id), endpoint: endpoint,
			query: url.Values{"session_id": {h.session.id}}, policy: retrySafe}
		_ = h.session.client.do(ctx, cl)
		cancel()
	}
}

// connection is one attempt at the session's event stream.
type connection struct {
	gen      uint64
	endpoint string
	started  time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	open     chan struct{} // closed when the reply headers arrived
	done     chan struct{} // closed when the stream ended; err says why
	err      error
}

// run keeps the session's stream and watches up until the session ends. It
// runs in its own goroutine.
func (h *watchHub) run() {
	defer h.closeAll()
	client := h.session.client
	attempt := 0
	for {
		if !h.pauseBeforeConnect(attempt) {
			return
		}
		endpoint := client.endpoints.pick()
		conn, err := h.connect(endpoint)
		if err == nil {
			err = h.serve(conn)
			conn.cancel()
			<-conn.done
			h.disconnect(conn)
		}
		if h.sessionEnded() {
			return
		}
		if conn != nil && time.Since(conn.started) >= healthyStream {
			attempt = 1
			continue
		}
		if !errors.Is(err, errStreamEnd) && !errors.Is(err, errNoStream) {
			client.endpoints.markDown(endpoint)
		}
		attempt++
	}
}

// pauseBeforeConnect waits before connection attempt: nothing for the
// first, a random delay below ReconnectJitter after a stream was lost, a
// growing jittered backoff after failures. It reports false when the
// session ended meanwhile.
func (h *watchHub) pauseBeforeConnect(attempt int) bool {
	client := h.session.client
	var d time.Duration
	switch {
	case attempt == 1:
		d = client.jitter(client.cfg.ReconnectJitter)
	case attempt > 1:
		d = client.backoff(attempt - 1)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-h.session.Done():
		return false
	}
}

func (h *watchHub) sessionEnded() bool {
	select {
	case <-h.session.Done():
		return true
	default:
		return false
	}
}

// connect opens the event stream on endpoint as a new connection.
func (h *watchHub) connect(endpoint string) (*connection, error) {
	h.mu.Lock()
	h.gen++
	conn := &connection{gen: h.gen, endpoint: endpoint, started: time.Now(),
		open: make(chan struct{}), done: make(chan struct{})}
	h.endpoint = endpoint
	if endpoint == h.staleEndpoint && len(h.staleIDs) > 0 {
		for _, id := range h.staleIDs {
			h.dead[id] = true
		}
		go h.cancelRemote(endpoint, h.staleIDs)
	}
	h.staleEndpoint, h.staleIDs = "", nil
	h.mu.Unlock()
	conn.ctx, conn.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(conn.done)
		cl := &call{method: "GET", path: eventsPath(h.session.id), endpoint: endpoint, policy: retrySafe,
			stream: func(body io.Reader) error {
				close(conn.open)
				watched := watchIdle(body, streamIdleTimeout, conn.cancel)
				defer watched.stop()
				return h.read(conn.gen, watched)
			}}
		conn.err = h.session.client.do(conn.ctx, cl)
		h.session.noteWriteError(conn.err)
	}()
	select {
	case <-conn.open:
		return conn, nil
	case <-conn.done:
		conn.cancel()
		return nil, conn.err
	case <-h.session.Done():
		conn.cancel()
		<-conn.done
		return nil, h.session.Err()
	}
}

// serve registers the watches on conn as they come until the stream ends.
func (h *watchHub) serve(conn *connection) error {
	for {
		if err := h.registerPending(conn); err != nil {
			return err
		}
		select {
		case <-h.kick:
		case <-conn.done:
			return conn.err
		case <-h.session.Done():
			return h.session.Err()
		}
	}
}

// registerPending registers, on conn, every live watcher that is not
// registered there. An error means the connection is unusable.
func (h *watchHub) registerPending(conn *connection) error {
	for {
		w, req := h.nextUnregistered()
		if w == nil {
			return nil
		}
		reply, err := h.session.client.registerWatch(conn.ctx, conn.endpoint, req)
		if err != nil {
			h.session.noteWriteError(err)
			if isConnectionError(err) || h.sessionEnded() {
				return err
			}
			// precondition_failed is the server's only refusal of this
			// kind: the session has no stream there.
			if api.CodeOf(err) == api.CodePreconditionFailed {
				h.refusals++
				if h.refusals < maxNoStreamRefusals {
					return fmt.Errorf("%w: %w", errNoStream, err)
				}
			}
			h.refusals = 0
			w.end(fmt.Errorf("client: watch %s: %w", w.path, err))
			continue
		}
		h.refusals = 0
		h.registered(conn, w, reply)
	}
}

// isConnectionError reports whether err from a registration means the
// server (rather than the request) is the problem.
func isConnectionError(err error) bool {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		return true
	}
	switch apiErr.Code {
	case api.CodeUnavailable, api.CodeOverloaded, api.CodeInternal, api.CodeSessionExpired:
		return true
	}
	return false
}

// nextUnregistered returns the oldest live watcher without a registration
// on the current connection, and its request.
func (h *watchHub) nextUnregistered() (*Watcher, api.WatchRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watchers {
		if !w.ended && !w.fired && w.watchID == "" {
			return w, w.registerRequestLocked(h.session.id)
		}
	}
	return nil, api.WatchRequest{}
}

// registered records w's registration on conn and hands it the events
// that arrived before the reply.
func (h *watchHub) registered(conn *connection, w *Watcher, reply *api.Watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if conn.gen != h.gen || w.ended {
		h.dead[reply.WatchID] = true
		return
	}
	w.watchID = reply.WatchID
	w.registeredLocked(reply)
	h.byID[reply.WatchID] = w
	kept := h.orphans[:0]
	for _, ev := range h.orphans {
		if ev.WatchID == reply.WatchID {
			w.acceptLocked(ev)
		} else {
			kept = append(kept, ev)
		}
	}
	h.orphans = kept
	w.signalRegistered()
}

// disconnect forgets conn's watch ids. A watcher registered below the
// newest index the stream delivered has seen every change up to it, so its
// known index rises to it; the others keep theirs.
func (h *watchHub) disconnect(conn *connection) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if conn.gen != h.gen {
		return
	}
	h.staleEndpoint, h.staleIDs = conn.endpoint, nil
	for _, w := range h.watchers {
		for shard, last := range h.lastStreamIndex {
			if at, ok := w.regIndex[shard]; ok && w.watchID != "" && at < last {
				w.known[shard] = max(w.known[shard], last)
			}
		}
		if w.watchID != "" && w.opts.persistent {
			h.staleIDs = append(h.staleIDs, w.watchID)
		}
		w.watchID = ""
	}
	h.byID, h.dead, h.orphans, h.lastStreamIndex = map[string]*Watcher{}, map[string]bool{}, nil, map[int]uint64{}
}

// closeAll ends every watcher with the session's error.
func (h *watchHub) closeAll() {
	reason := h.session.Err()
	if reason == nil {
		reason = ErrSessionClosed
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closedErr = reason
	for len(h.watchers) > 0 {
		h.watchers[0].endLocked(reason)
	}
}

// dispatch hands ev, from connection gen, to its watcher.
func (h *watchHub) dispatch(gen uint64, ev api.Event) {
	h.session.client.observeShardIndex(ev.Shard, ev.Index)
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen {
		return
	}
	h.lastStreamIndex[ev.Shard] = max(h.lastStreamIndex[ev.Shard], ev.Index)
	w := h.byID[ev.WatchID]
	if w == nil {
		if !h.dead[ev.WatchID] {
			if len(h.orphans) >= maxOrphans {
				h.orphans = h.orphans[1:]
			}
			h.orphans = append(h.orphans, ev)
		}
		return
	}
	w.acceptLocked(ev)
}

// errStreamEnd: the server ended the stream on purpose (an SSE "end").
var errStreamEnd = errors.New("client: the server ended the event stream")

// maxEventLine bounds one line of the event stream.
const maxEventLine = 1 << 20

// read parses the Server-Sent Events of connection gen and dispatches them
// until the stream ends. It returns why.
func (h *watchHub) read(gen uint64, body io.Reader) error {
	scanner := bufio.NewScanner(body)
	scanner.Buffer(make([]byte, 0, 4096), maxEventLine)
	var kind string
	var data bytes.Buffer
	for scanner.Scan() {
		line := scanner.Bytes()
		if len(line) > 0 {
			field, value := splitField(line)
			switch field {
			case "event":
				kind = string(value)
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(value)
			}
			continue
		}
		if err := h.handleEvent(gen, kind, data.Bytes()); err != nil {
			return err
		}
		kind = ""
		data.Reset()
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("client: reading the event stream: %w", err)
	}
	return errors.New("client: the event stream closed without an end event")
}

// splitField splits an SSE line into its field name and value.
func splitField(line []byte) (string, []byte) {
	field, value, found := bytes.Cut(line, []byte(":"))
	if !found {
		return string(line), nil
	}
	return string(field), bytes.TrimPrefix(value, []byte(" "))
}

// handleEvent acts on one complete SSE event.
func (h *watchHub) handleEvent(gen uint64, kind string, data []byte) error {
	switch kind {
	case "end":
		var end struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(data, &end)
		return fmt.Errorf("%w: %s", errStreamEnd, end.Reason)
	case "", "message", "event":
		if len(data) == 0 {
			return nil // a keepalive comment or an empty event
		}
		var ev api.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("client: bad event on the stream: %w", err)
		}
		h.dispatch(gen, ev)
	}
	return nil
}

// streamIdleTimeout: the server sends a ping on an idle stream every 15 s,
// so a stream silent for three pings is dead (a partition can leave the TCP
// connection open), and the hub reconnects elsewhere.
const streamIdleTimeout = 45 * time.Second

// idleReader is a stream body that calls onIdle when nothing arrived for
// longer than its timeout.
type idleReader struct {
	r    io.Reader
	last atomic.Int64 // unix nanoseconds of the last read that returned bytes
	done chan struct{}
}

func watchIdle(r io.Reader, timeout time.Duration, onIdle func()) *idleReader {
	ir := &idleReader{r: r, done: make(chan struct{})}
	ir.last.Store(time.Now().UnixNano())
	go func() {
		ticker := time.NewTicker(timeout / 3)
		defer ticker.Stop()
		for {
			select {
			case <-ticker.C:
				if time.Since(time.Unix(0, ir.last.Load())) > timeout {
					onIdle()
					return
				}
			case <-ir.done:
				return
			}
		}
	}()
	return ir
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (ir *idleReader) stop() { close(ir.done) }
