package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check"
	"github.com/latch-io/latch/internal/placement"
)

// watches is workload W: a writer puts to a few keys under /watch while
// watcher clients, each with a session, keep one persistent watch (recursive
// on /watch, or exact on one key) and read the session's event stream over
// the HTTP API. With several shards the watched keys are children of /watch,
// so their events come from one shard, ChildShard("/watch"): the watchers
// keep that shard's positions, send a recursive watch's known index as
// known_indexes, and ignore events of other shards (/watch's own node). On a
// stream end or error, and every few seconds anyway, a
// watcher cancels its watch and moves to another member, registering again
// with known_index = the last index it received.
//
// Checker, per watcher session: events within a stream never go back in
// index and across reconnects always move past the last index received; no
// (path, index) arrives twice; every acknowledged write to a watched key
// after the session's first registration and up to its last received index
// has an event at its index or is covered by a catch-up event (a watch that
// fired at once, at its registration index, for changes after its
// known_index); a session alive at the end receives up to each key's final
// modified index. An event names only committed writes: per key, one index
// per version, versions increasing with index, and consistent with the
// acknowledged writes and the key's final state.
type watches struct {
	// dropOne plants a client bug: the reader notes the index of one event
	// and then loses the event.
	dropOne bool
	// noKnownIndex plants a client bug: watchers re-register without known_index.
	noKnownIndex bool

	// shards is the cluster's shard count: the watchers' events come from
	// eventShard (the shard of /watch's children).
	shards     int
	eventShard int

	mu       sync.Mutex // guards acked
	acked    []ackedWrite
	watchers []*watcher // owned by their goroutines until check
}

type ackedWrite struct {
	path           string
	version, index uint64
}

const (
	watchKeys     = 4
	watchClients  = 3
	watchDir      = "/watch"
	watchTimeout  = 10 * time.Second // watcher sessions outlive the faults
	watchDrainFor = 10 * time.Second
)

func watchKey(k int) string { return fmt.Sprintf("%s/k%d", watchDir, k) }

func (w *watches) start(r *run) {
	r.Workers.Add(1)
	go w.writer(r)
	for c := range watchClients {
		wt := &watcher{worker: c, path: watchDir, recursive: true, plantDrop: w.dropOne && c == 0, noKnownIndex: w.noKnownIndex,
			sharded: w.shards > 1, shard: w.eventShard}
		if c == watchClients-1 {
			wt.path, wt.recursive = watchKey(0), false
		}
		w.watchers = append(w.watchers, wt)
		r.Workers.Add(1)
		go wt.loop(r)
	}
}

// writer puts unique values to random keys on random members and records
// the acknowledged (path, version, index).
func (w *watches) writer(r *run) {
	defer r.Workers.Done()
	for seq := 0; !r.Stopped(); seq++ {
		path := watchKey(r.Intn(watchKeys))
		ctx, cancel := check.RequestContext()
		var node api.Node
		err := r.CallKV(ctx, http.MethodPut, r.Node(), path, nil, &api.PutRequest{Value: fmt.Sprintf("w%d", seq)}, &node)
		cancel()
		if err == nil {
			w.mu.Lock()
			w.acked = append(w.acked, ackedWrite{path: path, version: node.Version, index: node.ModifiedIndex})
			w.mu.Unlock()
		}
		time.Sleep(time.Duration(5+r.Intn(20)) * time.Millisecond)
	}
}

// watcher is one client: a sequence of sessions (a new one when the last expired).
type watcher struct {
	worker       int
	path         string
	recursive    bool
	plantDrop    bool
	noKnownIndex bool
	// sharded: the cluster has several shards; shard is the one whose
	// events the watcher checks (see watches).
	sharded     bool
	shard       int
	sessions    []*watchSession
	reconnects  int
	staleEvents int // events of a watch this client had cancelled (left on a member it could not reach)
	// refusals are registrations the member refused because the session's
	// stream was no longer attached there (the member ended it between the
	// open and the registration); the watcher then moves on and registers
	// again, on a freshly opened stream, with its known index.
	refusals int
}

// watchSession is what one session's watcher registered and received.
type watchSession struct {
	s             *check.Session
	start         uint64 // registration index of its first watch: writes after it must be seen
	last          uint64 // highest index received
	registrations map[string]*registration
	order         []string            // watch ids in registration order
	byMember      map[string][]string // watch ids registered per member URL, to cancel on return
	events        []receivedEvent
	seen          map[pathIndex]bool // events received
	dropped       bool
	ended         bool // the session expired or the server ended it
	conn          *eventConn
}

// pathIndex names one change of a key: its path and the index that made it.
type pathIndex struct {
	path  string
	index uint64
}

type registration struct {
	member      string
	known, at   uint64
	registered  time.Time
	events      int    // received (recorded or not)
	first, last uint64 // indexes of its first and last event
	end         string // why its stream ended
}

func (reg *registration) String() string {
	return fmt.Sprintf("%s known %d at %d: %d events %d..%d, %s", reg.member, reg.known, reg.at, reg.events, reg.first, reg.last, reg.end)
}

type receivedEvent struct {
	api.Event
	catchUp bool
	known   uint64 // the known_index of its watch's registration
}

// eventConn is one open event stream and its current watch.
type eventConn struct {
	member  string
	watchID string
	floor   uint64 // last index received before this stream: its events must exceed it
	cancel  context.CancelFunc
	items   chan streamItem
}

type streamItem struct {
	event *api.Event
	end   string // the server's end reason, or the read error; the channel closes after it
}

func (wt *watcher) current() *watchSession {
	if len(wt.sessions) == 0 {
		return nil
	}
	return wt.sessions[len(wt.sessions)-1]
}

func (wt *watcher) loop(r *run) {
	defer r.Workers.Done()
	for !r.Stopped() {
		ws := wt.current()
		if ws == nil || ws.ended {
			if ws != nil {
				if ws.conn != nil {
					ws.conn.cancel()
				}
				ws.s.Stop() // abandoned: no more heartbeats keeping it and its watches alive
			}
			s := check.NewSession(r.Run, watchTimeout)
			if s == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ws = &watchSession{s: s, registrations: map[string]*registration{}, byMember: map[string][]string{}, seen: map[pathIndex]bool{}}
			wt.sessions = append(wt.sessions, ws)
		}
		if ws.conn == nil {
			if err := wt.connect(r, ws, r.Node()); err != nil {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		wt.follow(r, ws, time.Duration(1000+r.Intn(3000))*time.Millisecond, r.Stopping())
	}
}

// follow reads ws's stream for up to d; it leaves the stream (cancelling its
// watch) when d passes or the stream ends, and keeps it when quit closes.
func (wt *watcher) follow(r *run, ws *watchSession, d time.Duration, quit <-chan struct{}) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-quit:
			return
		case <-timer.C:
			wt.leave(r, ws)
			return
		case item, ok := <-ws.conn.items:
			if !ok {
				wt.leave(r, ws)
				return
			}
			if item.event == nil {
				ws.streamEnded(item.end)
				continue
			}
			wt.receive(r, ws, *item.event)
		}
	}
}

// streamEnded records why the current stream ended; a stream ended with
// its session ends ws.
func (ws *watchSession) streamEnded(end string) {
	ws.registrations[ws.conn.watchID].end = end
	if strings.Contains(end, "session ended") || strings.Contains(end, string(api.CodeSessionExpired)) {
		ws.ended = true
	}
}

// leave closes the stream and cancels its watch, best effort.
func (wt *watcher) leave(r *run, ws *watchSession) {
	conn := ws.conn
	ws.conn = nil
	conn.cancel()
	if reg := ws.registrations[conn.watchID]; reg.end == "open" {
		reg.end = "moved on"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.Call(ctx, http.MethodDelete, conn.member, "/v1/watch/"+conn.watchID, url.Values{"session_id": {ws.s.ID}}, nil, nil)
	wt.reconnects++
}

// connect opens the session's stream on member, then registers the watch
// there (after cancelling what this session left there), in the order the
// client library uses: a member accepts a watch only for a session whose
// stream it has attached (else 409 precondition_failed), events go to
// whichever stream of the session the server has attached, and a stream
// this watcher just abandoned on member may still be attached for a moment,
// taking a catch-up event with it if the watch were registered first. On a
// refusal it closes the stream and returns the error; the loop connects
// again, to a member picked anew, with the same known index.
func (wt *watcher) connect(r *run, ws *watchSession, member string) error {
	for _, id := range ws.byMember[member] {
		ctx, cancel := check.RequestContext()
		_ = r.Call(ctx, http.MethodDelete, member, "/v1/watch/"+id, url.Values{"session_id": {ws.s.ID}}, nil, nil)
		cancel()
	}
	ws.byMember[member] = nil
	known := max(ws.start, ws.last)
	if wt.noKnownIndex {
		known = 0
		// Make the planted bug bite every time, not only when a write
		// happens to land in the few milliseconds of a move: the writer
		// puts several values while this watcher is away.
		time.Sleep(300 * time.Millisecond)
	}
	if len(ws.registrations) == 0 {
		known = 0
	}
	conn, err := openEvents(r.HTTP, member, ws.s.ID)
	if check.Code(err) == api.CodeSessionExpired {
		ws.ended = true
	}
	if err != nil {
		return err
	}
	ctx, cancel := check.RequestContext()
	var reply api.Watch
	err = r.Call(ctx, http.MethodPost, member, "/v1/watch", nil, wt.request(ws.s.ID, known), &reply)
	cancel()
	switch check.Code(err) {
	case api.CodeSessionExpired:
		ws.ended = true
	case api.CodePreconditionFailed:
		wt.refusals++
	}
	if err != nil {
		conn.cancel()
		return err
	}
	at := reply.Index
	if reply.Indexes != nil {
		at = reply.Indexes[wt.shard]
	}
	if len(ws.registrations) == 0 {
		ws.start = at
	}
	ws.registrations[reply.WatchID] = &registration{member: member, known: known, at: at, registered: time.Now(), end: "open"}
	ws.order = append(ws.order, reply.WatchID)
	ws.byMember[member] = append(ws.byMember[member], reply.WatchID)
	conn.watchID, conn.floor = reply.WatchID, ws.last
	ws.conn = conn
	return nil
}

// request is the registration of wt's watch for session with known, an
// index of wt.shard: an integer known_index with one shard or for the exact
// watch (whose key lives in that shard), known_indexes for a recursive watch
// over several shards.
func (wt *watcher) request(session string, known uint64) *api.WatchRequest {
	req := &api.WatchRequest{Path: wt.path, Recursive: wt.recursive, SessionID: session, Persistent: true}
	switch {
	case !wt.sharded || !wt.recursive:
		req.KnownIndex = known
	case known != 0:
		req.KnownIndexes = map[int]uint64{wt.shard: known}
	}
	return req
}

// openEvents opens GET /v1/session/{id}/events on member; a goroutine
// parses it into the returned conn's items.
func openEvents(client *http.Client, member, session string) (*eventConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, member+"/v1/session/"+session+"/events", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	timer := time.AfterFunc(3*time.Second, cancel) // bounds the wait for the headers only
	resp, err := client.Do(req)
	if !timer.Stop() || err != nil {
		cancel()
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("%w: events on %s: no headers within 3s", check.ErrTransport, member)
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		var e api.ErrorBody
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error.Code != "" {
			return nil, &e.Error
		}
		return nil, fmt.Errorf("events on %s: status %d", member, resp.StatusCode)
	}
	conn := &eventConn{member: member, cancel: cancel, items: make(chan streamItem, 4096)}
	go conn.read(resp)
	return conn, nil
}

// read parses Server-Sent Events until the stream ends.
func (c *eventConn) read(resp *http.Response) {
	defer close(c.items)
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 64*1024), 1<<20)
	isEnd := false
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case line == "event: end":
			isEnd = true
		case strings.HasPrefix(line, "data: ") && isEnd:
			c.items <- streamItem{end: strings.TrimPrefix(line, "data: ")}
			return
		case strings.HasPrefix(line, "data: "):
			var ev api.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				c.items <- streamItem{end: fmt.Sprintf("bad event %q: %v", line, err)}
				return
			}
			c.items <- streamItem{event: &ev}
		}
	}
	c.items <- streamItem{end: fmt.Sprintf("read: %v", scanner.Err())}
}

// receive checks one event's order and uniqueness and records it.
func (wt *watcher) receive(r *run, ws *watchSession, ev api.Event) {
	if ev.WatchID != ws.conn.watchID {
		wt.staleEvents++
		return
	}
	if ev.Shard != wt.shard {
		return // /watch's own node, in another shard than its children: not checked
	}
	reg := ws.registrations[ev.WatchID]
	reg.events++
	reg.last = ev.Index
	if reg.first == 0 {
		reg.first = ev.Index
	}
	switch {
	case ev.Index <= ws.conn.floor:
		r.Anomaly("W: session %s: event %s %s@%d on %s after a reconnect does not pass the last index received before it, %d",
			ws.s.ID, ev.Event, ev.Path, ev.Index, ws.conn.member, ws.conn.floor)
		r.Update(func(report *Report) { report.WatchReorders++ })
	case ev.Index < ws.last:
		r.Anomaly("W: session %s: event %s %s@%d on %s after index %d in the same stream", ws.s.ID, ev.Event, ev.Path, ev.Index, ws.conn.member, ws.last)
		r.Update(func(report *Report) { report.WatchReorders++ })
	}
	key := pathIndex{ev.Path, ev.Index}
	if ws.seen[key] {
		r.Anomaly("W: session %s: event %s %s@%d received twice (watch %s on %s)", ws.s.ID, ev.Event, ev.Path, ev.Index, ev.WatchID, ws.conn.member)
		r.Update(func(report *Report) { report.WatchDuplicates++ })
	}
	ws.seen[key] = true
	ws.last = max(ws.last, ev.Index)
	catchUp := ev.Index == reg.at
	if wt.plantDrop && !ws.dropped && !catchUp && len(ws.events) >= 20 {
		ws.dropped = true // planted: the index is noted, the event lost
		return
	}
	ws.events = append(ws.events, receivedEvent{Event: ev, catchUp: catchUp, known: reg.known})
}

// watches covers path?
func (wt *watcher) covers(path string) bool {
	if wt.recursive {
		return strings.HasPrefix(path, wt.path+"/")
	}
	return path == wt.path
}

func (w *watches) check(r *run) error {
	defer func() {
		for _, wt := range w.watchers {
			for _, ws := range wt.sessions {
				if ws.conn != nil {
					ws.conn.cancel()
				}
				ws.s.Stop()
				ws.s.Close(r.Run)
			}
		}
	}()
	final := map[string]api.Node{}
	for k := range watchKeys {
		ctx, cancel := check.RequestContext()
		var node api.Node
		err := r.CallKV(ctx, http.MethodGet, r.cluster.Members[0].ClientURL, watchKey(k), url.Values{"consistency": {api.Stale}}, nil, &node)
		cancel()
		switch {
		case err == nil:
			final[node.Path] = node
		case check.Code(err) != api.CodeNotFound:
			return fmt.Errorf("W: final state of %s: %w", watchKey(k), err)
		}
	}
	w.drain(r, final)
	w.mu.Lock()
	acked := w.acked
	w.mu.Unlock()
	w.checkCommitted(r, acked, final)
	events, sessions, reconnects, stale, refusals := 0, 0, 0, 0, 0
	for _, wt := range w.watchers {
		reconnects += wt.reconnects
		stale += wt.staleEvents
		refusals += wt.refusals
		for _, ws := range wt.sessions {
			sessions++
			events += len(ws.events)
			w.checkCoverage(r, wt, ws, acked)
		}
	}
	r.Report.Operations += events + len(acked)
	r.Report.WatchEvents += events
	r.Report.WatchSessions += sessions
	r.Report.WatchReconnects += reconnects
	r.Logf("chaos W: %d events over %d watcher sessions, %d reconnects (%d events of cancelled watches ignored, %d registrations refused for want of a stream), %d acknowledged writes",
		events, sessions, reconnects, stale, refusals, len(acked))
	return nil
}

// drain reads, for every live watcher session, until it received each
// watched key's final modified index (the cluster is quiet now),
// reconnecting to another member when its stream ended or stalled.
func (w *watches) drain(r *run, final map[string]api.Node) {
	for _, wt := range w.watchers {
		ws := wt.current()
		if ws == nil || ws.ended {
			continue
		}
		var target uint64
		for path, node := range final {
			if wt.covers(path) {
				target = max(target, node.ModifiedIndex)
			}
		}
		for attempt := 0; ws.last < target && !ws.ended && attempt < 4; attempt++ {
			if ws.conn == nil {
				if err := wt.connect(r, ws, r.Node()); err != nil {
					continue
				}
			}
			wt.drainConn(r, ws, target)
			if ws.last < target && ws.conn != nil {
				wt.leave(r, ws)
			}
		}
		if ws.last < target && !ws.ended {
			r.Anomaly("W: session %s watching %s received up to index %d, not the final index %d", ws.s.ID, wt.path, ws.last, target)
			r.Update(func(report *Report) { report.WatchGaps++ })
		}
	}
}

func (wt *watcher) drainConn(r *run, ws *watchSession, target uint64) {
	deadline := time.NewTimer(watchDrainFor)
	defer deadline.Stop()
	for ws.last < target {
		select {
		case <-deadline.C:
			return
		case item, ok := <-ws.conn.items:
			if !ok {
				wt.leave(r, ws)
				return
			}
			if item.event != nil {
				wt.receive(r, ws, *item.event)
				continue
			}
			ws.streamEnded(item.end)
		}
	}
}

// checkCoverage finds acknowledged writes the session should have seen but did not.
func (w *watches) checkCoverage(r *run, wt *watcher, ws *watchSession, acked []ackedWrite) {
	for _, write := range acked {
		if !wt.covers(write.path) || write.index <= ws.start || write.index > ws.last {
			continue
		}
		if w.covered(ws, write) {
			continue
		}
		r.Anomaly("W: session %s watching %s missed %s version %d at index %d (first registration at %d, last index received %d); registrations around it:%s",
			ws.s.ID, wt.path, write.path, write.version, write.index, ws.start, ws.last, ws.around(write.index))
		r.Update(func(report *Report) { report.WatchGaps++ })
	}
}

// around describes the registration that should have delivered index (the
// last one registered with a known index below it), its neighbours, and the
// events received near index.
func (ws *watchSession) around(index uint64) string {
	owner := 0
	for k, id := range ws.order {
		if ws.registrations[id].known < index {
			owner = k
		}
	}
	var b strings.Builder
	for k := max(0, owner-1); k < min(len(ws.order), owner+2); k++ {
		id := ws.order[k]
		fmt.Fprintf(&b, " [%d %s: %s]", k, id, ws.registrations[id])
	}
	for _, ev := range ws.events {
		if ev.Index+50 >= index && ev.Index <= index+50 {
			fmt.Fprintf(&b, " {%s %s v%d @%d watch %s catch-up %v}", ev.Event.Event, ev.Path, ev.Version, ev.Index, ev.WatchID, ev.catchUp)
		}
	}
	return b.String()
}

func (w *watches) covered(ws *watchSession, write ackedWrite) bool {
	if ws.seen[pathIndex{write.path, write.index}] {
		for _, ev := range ws.events {
			if ev.Path == write.path && ev.Index == write.index {
				return true
			}
		}
	}
	for _, ev := range ws.events {
		if ev.catchUp && ev.known < write.index && write.index <= ev.Index {
			return true
		}
	}
	return false
}

// checkCommitted checks that every event names a committed write: per key,
// a version has one index, versions increase with index, and both agree
// with the acknowledged writes and the final state.
func (w *watches) checkCommitted(r *run, acked []ackedWrite, final map[string]api.Node) {
	indexOf := map[pathVersion]uint64{} // from acks, the final state and non-catch-up events
	source := map[pathVersion]string{}
	note := func(path string, version, index uint64, from string) {
		key := pathVersion{path, version}
		if prev, ok := indexOf[key]; ok && prev != index {
			r.Anomaly("W: %s version %d at index %d (%s) and at index %d (%s)", path, version, prev, source[key], index, from)
			r.Update(func(report *Report) { report.WatchUncommitted++ })
			return
		}
		indexOf[key], source[key] = index, from
	}
	for _, write := range acked {
		note(write.path, write.version, write.index, "acknowledged write")
	}
	for _, node := range final {
		note(node.Path, node.Version, node.ModifiedIndex, "final state")
	}
	// Catch-up events are checked against the index of every version the
	// other events named, so they come second.
	for _, catchUps := range []bool{false, true} {
		for _, wt := range w.watchers {
			for _, ws := range wt.sessions {
				for _, ev := range ws.events {
					if ev.catchUp != catchUps || !strings.HasPrefix(ev.Path, watchDir+"/") || ev.Event.Event == api.EventChildrenChanged {
						continue
					}
					w.checkEvent(r, ws, ev, final, indexOf, note)
				}
			}
		}
	}
	w.checkVersionOrder(r, indexOf)
}

// pathVersion names one version of a key.
type pathVersion struct {
	path    string
	version uint64
}

// checkVersionOrder: per key, a later version was written at a later index.
func (w *watches) checkVersionOrder(r *run, indexOf map[pathVersion]uint64) {
	type write struct{ version, index uint64 }
	byPath := map[string][]write{}
	for key, index := range indexOf {
		byPath[key.path] = append(byPath[key.path], write{key.version, index})
	}
	for path, writes := range byPath {
		sort.Slice(writes, func(a, b int) bool { return writes[a].version < writes[b].version })
		for k := 1; k < len(writes); k++ {
			if writes[k].index <= writes[k-1].index {
				r.Anomaly("W: %s version %d at index %d but version %d at index %d",
					path, writes[k].version, writes[k].index, writes[k-1].version, writes[k-1].index)
				r.Update(func(report *Report) { report.WatchUncommitted++ })
			}
		}
	}
}

func (w *watches) checkEvent(r *run, ws *watchSession, ev receivedEvent, final map[string]api.Node,
	indexOf map[pathVersion]uint64, note func(string, uint64, uint64, string)) {
	node, exists := final[ev.Path]
	bad := func(why string) {
		r.Anomaly("W: session %s received %s %s version %d at index %d: %s", ws.s.ID, ev.Event.Event, ev.Path, ev.Version, ev.Index, why)
		r.Update(func(report *Report) { report.WatchUncommitted++ })
	}
	switch {
	case !exists:
		bad("the key does not exist at the end")
	case ev.Version > node.Version:
		bad(fmt.Sprintf("beyond the final version %d", node.Version))
	case ev.catchUp:
		// The version current at the registration index: its write is at or
		// before it, the next version's after it.
		if at, ok := indexOf[pathVersion{ev.Path, ev.Version}]; ok && at > ev.Index {
			bad(fmt.Sprintf("catch-up names a version written later, at index %d", at))
		}
		if next, ok := indexOf[pathVersion{ev.Path, ev.Version + 1}]; ok && next <= ev.Index {
			bad(fmt.Sprintf("catch-up names a version replaced at index %d", next))
		}
	default:
		note(ev.Path, ev.Version, ev.Index, "event of session "+ws.s.ID)
	}
}

// newWatches returns workload W for cfg's cluster.
func newWatches(cfg Config) *watches {
	w := &watches{dropOne: cfg.DropWatchEvent, noKnownIndex: cfg.WatchWithoutKnownIndex, shards: max(cfg.Shards, 1)}
	if place, err := placement.New(w.shards); err == nil {
		w.eventShard = place.ChildShard(watchDir)
	}
	return w
}
