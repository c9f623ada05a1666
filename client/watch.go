package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"time"

	"github.com/latch-io/latch/api"
)

// Errors a Watcher ends with, reported by Watcher.Err.
var (
	// ErrWatchClosed: Close was called or the Watch context ended.
	ErrWatchClosed = errors.New("client: watch closed")
	// ErrWatchOverflow: a persistent watcher's reader fell more than
	// maxUndelivered notifications behind.
	ErrWatchOverflow = errors.New("client: watch overflow: notifications were not read")
)

// maxUndelivered bounds the notifications a Watcher keeps for a reader
// that does not keep up.
const maxUndelivered = 4096

// Event is one watch notification.
type Event struct {
	api.Event
	// Resync is set when the server fired the watch as it was registered
	// (or re-registered after the event stream was lost) because what it
	// watches changed after the known index: the changes in between were
	// coalesced into this one, so the reader must re-read. Kind and Path then
	// describe one of those changes only.
	Resync bool `json:"resync,omitempty"`
}

// WatchOption adjusts a Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	recursive  bool
	persistent bool
	knownIndex uint64
	jitter     time.Duration
	jitterSet  bool
}

// WatchRecursive makes the watch fire for changes anywhere under the path,
// not only at it.
func WatchRecursive() WatchOption { return func(o *watchOptions) { o.recursive = true } }

// Persistent makes the watch deliver every change until it is closed; by
// default a watch is one-shot: it delivers one notification and ends.
func Persistent() WatchOption { return func(o *watchOptions) { o.persistent = true } }

// KnownIndex says the caller knows the watched state as of index (the Index
// of the read it made): a change after it fires the watch at once (with
// Resync set), so nothing falls between a read and its watch.
func KnownIndex(index uint64) WatchOption { return func(o *watchOptions) { o.knownIndex = index } }

// WatchJitter overrides Config.NotifyJitter for this watch; 0 delivers
// without delay (for a watch only one client holds, like a lock waiter's on
// its predecessor, where there is no herd to smear).
func WatchJitter(bound time.Duration) WatchOption {
	return func(o *watchOptions) { o.jitter, o.jitterSet = max(bound, 0), true }
}

// Watcher delivers the notifications of one watch, in index order, without
// duplicates. It lives on a Session: its notifications come over the
// session's one event stream, and when that stream is lost (a server dies,
// or drops the session's watches because it fell behind) the session
// re-registers the watch on some server with the highest index the watcher
// has seen as known_index, so no change is missed.
type Watcher struct {
	hub     *watchHub
	path    string
	opts    watchOptions
	events  chan Event    // to the reader; closed when the watcher ends
	wake    chan struct{} // capacity 1: a notification was queued or the watcher ended
	stopped chan struct{} // closed by end
	// registered is closed after the first registration's outcome is known.
	registered chan struct{}

	// The fields below are guarded by hub.mu. Indexes are kept per shard
	// (a cluster of one shard has shard 0 only): the indexes of different
	// shards are of different logs, and a watch's events come in index
	// order per shard, in no order across shards.
	watchID string // id on the current connection; "" when not registered on it
	// regIndex is each shard's index at the latest registration.
	regIndex map[int]uint64
	// known is, per shard, the index up to which the watcher has been told
	// about every change of that shard: the caller's KnownIndex (of the
	// path's shard) or the first registration's indexes, raised by every
	// notification. Re-registration sends it as known_index (one shard) or
	// known_indexes (several).
	known map[int]uint64
	// sharded is set once a registration reply showed a sharded cluster.
	sharded        bool
	currentVersion uint64                  // of the node at the first registration
	lastIndex      map[int]uint64          // per shard, index of the newest queued notification
	lastPaths      map[int]map[string]bool // per shard, paths notified at lastIndex
	queue          []Event
	fired          bool // a one-shot watcher has its notification
	err            error
	ended          bool
}

// Watch registers a watch on path, on this session, and returns its
// Watcher. It waits until a server has registered the watch (or refused
// it); ctx bounds that wait and the life of the watch: when ctx ends, the
// watcher ends as if Close was called.
func (s *Session) Watch(ctx context.Context, path string, opts ...WatchOption) (*Watcher, error) {
	if err := api.ValidatePath(path); err != nil {
		return nil, err
	}
	o := watchOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.jitterSet {
		o.jitter = s.client.cfg.NotifyJitter
	}
	w := &Watcher{path: path, opts: o, events: make(chan Event), wake: make(chan struct{}, 1),
		stopped: make(chan struct{}), registered: make(chan struct{}),
		known: map[int]uint64{}, regIndex: map[int]uint64{}, lastIndex: map[int]uint64{}, lastPaths: map[int]map[string]bool{}}
	hub := s.watchHub()
	w.hub = hub
	if err := hub.add(w); err != nil {
		return nil, err
	}
	go w.deliver()
	go func() {
		select {
		case <-ctx.Done():
			w.end(ErrWatchClosed)
		case <-w.stopped:
		}
	}()
	select {
	case <-w.registered:
	case <-w.stopped:
	}
	if err := w.Err(); err != nil && !errors.Is(err, ErrWatchClosed) {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("client: watch %s: %w", path, ctx.Err())
	}
	return w, nil
}

// Events returns the channel of notifications. It is closed when the
// watcher ends: after a one-shot watcher's notification, on Close or the end
// of the Watch context, or when the session ends; Err then says why.
func (w *Watcher) Events() <-chan Event { return w.events }

// Path returns the watched path.
func (w *Watcher) Path() string { return w.path }

// CurrentVersion returns the node's version when the watch was first
// registered (0 if it did not exist).
func (w *Watcher) CurrentVersion() uint64 {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.currentVersion
}

// Err returns why the watcher ended: nil while it runs and after a one-shot
// watcher delivered its notification, ErrWatchClosed after Close, or the
// session's or the server's error.
func (w *Watcher) Err() error {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if errors.Is(w.err, errFired) {
		return nil
	}
	return w.err
}

// Close ends the watcher. Notifications not yet read are dropped.
func (w *Watcher) Close() { w.end(ErrWatchClosed) }

// errFired ends a one-shot watcher once its notification is read.
var errFired = errors.New("client: one-shot watch fired")

// end ends the watcher with reason (the first reason wins).
func (w *Watcher) end(reason error) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	w.endLocked(reason)
}

func (w *Watcher) endLocked(reason error) {
	if w.ended {
		return
	}
	w.ended, w.err = true, reason
	w.hub.removeLocked(w)
	close(w.stopped)
	w.signalRegistered()
}

func (w *Watcher) signalRegistered() {
	select {
	case <-w.registered:
	default:
		close(w.registered)
	}
}

// acceptLocked queues ev unless it is older than, or a repeat of, what the
// watcher already queued. It reports whether ev was queued.
func (w *Watcher) acceptLocked(ev api.Event) bool {
	last := w.lastIndex[ev.Shard]
	if w.ended || w.fired || ev.Index < last || (ev.Index == last && w.lastPaths[ev.Shard][ev.Path]) {
		return false
	}
	if ev.Index > last {
		w.lastIndex[ev.Shard], w.lastPaths[ev.Shard] = ev.Index, map[string]bool{}
	}
	w.lastPaths[ev.Shard][ev.Path] = true
	w.known[ev.Shard] = max(w.known[ev.Shard], ev.Index)
	if len(w.queue) >= maxUndelivered {
		w.endLocked(ErrWatchOverflow)
		return false
	}
	w.queue = append(w.queue, Event{Event: ev, Resync: ev.Index <= w.regIndex[ev.Shard]})
	if !w.opts.persistent {
		w.fired = true
		w.hub.forgetIDLocked(w)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// deliver hands queued notifications to the reader, each after a random
// delay below the watch's jitter. It runs in its own goroutine and closes
// Events when the watcher ends.
func (w *Watcher) deliver() {
	defer close(w.events)
	for {
		ev, ok, done := w.next()
		if done {
			return
		}
		if !ok {
			select {
			case <-w.wake:
			case <-w.stopped:
			}
			continue
		}
		if !w.pause(w.hub.session.client.jitter(w.opts.jitter)) {
			return
		}
		select {
		case w.events <- ev:
		case <-w.stopped:
			return
		}
		if !w.opts.persistent {
			w.end(errFired)
			return
		}
	}
}

// next pops the oldest queued notification; done reports the watcher ended.
func (w *Watcher) next() (ev Event, ok, done bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if w.ended {
		return Event{}, false, true
	}
	if len(w.queue) == 0 {
		return Event{}, false, false
	}
	ev = w.queue[0]
	w.queue = w.queue[1:]
	return ev, true, false
}

// pause waits d unless the watcher ends first; it reports whether it may
// go on.
func (w *Watcher) pause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-w.stopped:
		return false
	}
}

// registerRequest returns the body of w's next registration.
// Before the first reply it sends the caller's KnownIndex; after, with one
// shard, known_index as before, and with several, every shard's known
// index as known_indexes.
func (w *Watcher) registerRequestLocked(sessionID string) api.WatchRequest {
	req := api.WatchRequest{Path: w.path, Recursive: w.opts.recursive, SessionID: sessionID, Persistent: w.opts.persistent}
	switch {
	case len(w.known) == 0:
		req.KnownIndex = w.opts.knownIndex
	case w.sharded:
		req.KnownIndexes = maps.Clone(w.known)
	default:
		req.KnownIndex = w.known[0]
	}
	return req
}

// registeredLocked records a registration reply: each shard's start and,
// the first time, the known indexes (the caller's KnownIndex for the path's
// shard, the registration's indexes for the others).
func (w *Watcher) registeredLocked(reply *api.Watch) {
	indexes := reply.Indexes
	if indexes == nil {
		indexes = map[int]uint64{0: reply.Index}
	} else {
		w.sharded = true
	}
	first := len(w.known) == 0
	for shard, index := range indexes {
		w.regIndex[shard] = index
		if first {
			w.known[shard] = index
		}
	}
	if first {
		w.currentVersion = reply.CurrentVersion
		if w.opts.knownIndex != 0 {
			w.known[reply.Shard] = w.opts.knownIndex
		}
	}
}

// registerWatch sends one POST /v1/watch to endpoint, without failover: a
// watch lives on the server that registered it, beside the event stream.
func (c *Client) registerWatch(ctx context.Context, endpoint string, req api.WatchRequest) (*api.Watch, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var reply api.Watch
	cl := &call{method: "POST", path: "/v1/watch", body: body, policy: retrySafe, endpoint: endpoint, out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &reply, nil
}

// eventsPath is the URL path of session id's event stream.
func eventsPath(id string) string { return "/v1/session/" + url.PathEscape(id) + "/events" }

// watchHub returns the session's watch hub, starting it on first use.
func (s *Session) watchHub() *watchHub {
	s.hubOnce.Do(func() {
		s.hub = newWatchHub(s)
		go s.hub.run()
	})
	return s.hub
}

// Client returns the client the session was made with.
func (s *Session) Client() *Client { return s.client }
