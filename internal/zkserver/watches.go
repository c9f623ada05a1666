package zkserver

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkproto"
)

// watchKind is a ZooKeeper watch type as this connection keeps it.
type watchKind uint8

const (
	kindData       watchKind = iota // getData on a node, exists on a node: one-shot
	kindExist                       // exists on a missing node: one-shot
	kindChild                       // getChildren: one-shot
	kindPersistent                  // addWatch PERSISTENT
	kindRecursive                   // addWatch PERSISTENT_RECURSIVE
)

// oneShot reports whether a watch of kind k fires once.
func (k watchKind) oneShot() bool { return k <= kindChild }

// The WatcherType values of checkWatches and removeWatches.
const (
	watcherChildren            = 1
	watcherData                = 2
	watcherAny                 = 3
	watcherPersistent          = 4
	watcherPersistentRecursive = 5
)

// matches reports whether a watch of kind k is of WatcherType t.
func (k watchKind) matches(t int32) bool {
	switch t {
	case watcherChildren:
		return k == kindChild
	case watcherData:
		return k == kindData || k == kindExist
	case watcherAny:
		return true
	case watcherPersistent:
		return k == kindPersistent
	case watcherPersistentRecursive:
		return k == kindRecursive
	}
	return false
}

type watchKey struct {
	path string
	kind watchKind // kindData for data and exist watches, which share one
}

// keyKind is the kind of the entry that keeps watches of kind k: data and
// exist watches see the same changes of one node.
func keyKind(k watchKind) watchKind {
	if k == kindExist {
		return kindData
	}
	return k
}

// watchEntry is one persistent latch watch of the session (exact, or
// recursive for kindRecursive) over which the connection keeps its
// ZooKeeper watches of one path and kind: the latch watch reports every
// change, and each generation (one per request that set the watch) applies
// ZooKeeper's trigger rules from the read of that request. The entry and
// its latch watch go when no generation is left.
type watchEntry struct {
	key  watchKey
	id   uint64   // the latch watch
	home int      // the shard of the path, whose index at is
	at   shardPos // the applied indexes the latch watch was added at
	gens []*watchGen
}

// watchGen is the watch one request set: it fires on the first change
// after the state its read saw (after). Its notifications are held until
// that request's reply is on the wire: a client registers a watch when the
// reply comes, and drops a notification for a watch it does not hold yet.
type watchGen struct {
	e     *watchEntry
	kind  watchKind // kindData or kindExist in a data entry, else the entry's kind
	after shardPos  // changes at or below this position are not reported
	armed bool
	// pending holds the events that came before the generation was armed
	// (the latch watch is added before the read that sets a ZooKeeper
	// watch, so that no change between the two is lost).
	pending []api.Event
	// catchUp: set by setWatches for a child watch whose children live in
	// another shard than its node (childCatchUp): an event of the
	// children's shard at the entry's position there is the latch
	// registry's report that the children changed while the client was
	// away, not a change at that index.
	catchUp bool
	fired   bool // a one-shot watch that triggered
	held    bool // until the reply of the request that set it is sent
	notes   []heldNote
}

// heldNote is a notification a held generation owes its client, of the
// change at index of shard.
type heldNote struct {
	typ   zkproto.EventType
	path  string
	shard int
	index uint64
}

// notified identifies a notification already sent, so that one change is
// notified once however many watches of the connection it triggers, as
// ZooKeeper does.
type notified struct {
	path string
	typ  zkproto.EventType
}

// watchTable is a connection's ZooKeeper watches.
type watchTable struct {
	c      *conn
	notify func(zkproto.EventType, string) // sends a notification
	cancel func(id uint64)                 // cancels a latch watch

	mu      sync.Mutex
	byKey   map[watchKey]*watchEntry
	byID    map[uint64]*watchEntry
	atShard int               // the shard of atIndex
	atIndex uint64            // the index of the notifications in sentAt
	sentAt  map[notified]bool // notifications sent at atIndex of atShard
	// owed counts, by index of shard 0 (the log of the zxids), the events
	// of changes the connection may still owe its client a notification
	// for: those waiting in a watch not yet armed (pending), and the
	// notifications held behind a reply (notes). owedFrom is the least
	// index in owed (math.MaxUint64 for none), read without mu: no frame
	// carries a zxid at or past it (conn.zxidLocked). It is lowered before
	// an event is left owed, and raised only once its notification was
	// sent or the event found not to fire. A batch of payments raises it
	// once, at its end (settleOwedLocked): paying events one by one in
	// index order would rescan owed for each.
	owed      map[uint64]int
	owedFrom  atomic.Uint64
	owedStale bool // owedFrom's index was paid off: settleOwedLocked recounts
}

func newWatchTable(c *conn) *watchTable {
	t := newTableWith(c.notify, func(id uint64) { _ = c.l.srv.CancelWatch(c.session, id) })
	t.c = c
	return t
}

// newTableWith is a table without a connection (prepare needs one), which
// sends its notifications with notify and cancels latch watches with
// cancel.
func newTableWith(notify func(zkproto.EventType, string), cancel func(uint64)) *watchTable {
	t := &watchTable{notify: notify, cancel: cancel,
		byKey: map[watchKey]*watchEntry{}, byID: map[uint64]*watchEntry{}, sentAt: map[notified]bool{},
		owed: map[uint64]int{}}
	t.owedFrom.Store(math.MaxUint64)
	return t
}

// oweLocked counts the event of the change at index of shard as owed (see
// owed); only shard 0's indexes are zxids.
func (t *watchTable) oweLocked(shard int, index uint64) {
	if shard != 0 {
		return
	}
	t.owed[index]++
	if index < t.owedFrom.Load() {
		t.owedFrom.Store(index)
	}
}

// paidLocked counts out an event oweLocked counted: its notification was
// sent, or it does not fire.
func (t *watchTable) paidLocked(shard int, index uint64) {
	if shard != 0 {
		return
	}
	if n := t.owed[index] - 1; n > 0 {
		t.owed[index] = n
		return
	}
	delete(t.owed, index)
	if index == t.owedFrom.Load() {
		t.owedStale = true // owedFrom stays below every owed index meanwhile
	}
}

// settleOwedLocked raises owedFrom to the least index still owed, once a
// batch of payments (paidLocked) paid off the one it named.
func (t *watchTable) settleOwedLocked() {
	if !t.owedStale {
		return
	}
	t.owedStale = false
	least := uint64(math.MaxUint64)
	for i := range t.owed {
		least = min(least, i)
	}
	t.owedFrom.Store(least)
}

// prepare adds a ZooKeeper watch of kind on path, not yet armed: the
// caller reads, then arms it with the read's index (or drops it). The
// latch watch of the path and kind is added first if the connection holds
// none. A persistent watch the connection holds already is not set again
// (nil, no error). With hold, the watch's notifications wait for release.
// known, if not 0, is setWatches' relativeZxid: a one-shot watch then
// reports at once what it missed (prepareAgain); a persistent one is set
// again and reports nothing it missed, as ZooKeeper's setWatches only
// adds it again.
func (t *watchTable) prepare(ctx context.Context, path string, kind watchKind, known uint64, hold bool) (*watchGen, error) {
	if known > 0 && kind.oneShot() {
		return t.prepareAgain(ctx, path, kind, known, hold)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	key := watchKey{path, keyKind(kind)}
	e := t.byKey[key]
	switch {
	case e != nil && !kind.oneShot():
		return nil, nil
	case e == nil:
		var err error
		if e, err = t.addEntryLocked(ctx, key, nil); err != nil {
			return nil, err
		}
	}
	return addGenLocked(e, kind, false, hold), nil
}

// prepareAgain adds a one-shot watch that setWatches sets again after a
// reconnect, for a client that saw every change up to known (its
// relativeZxid), and fires it at once if it missed one, as ZooKeeper's
// setWatches decides, from the node as it is now, never from the kind of
// its latest change: a data watch fires NodeDeleted if the node is gone,
// NodeDataChanged if its mzxid is past known; an exist watch NodeCreated
// if the node is there; a child watch NodeDeleted if the node is gone,
// NodeChildrenChanged if its pzxid is past known (missed). A watch that
// fires is gone once armed; the others stay, as any watch. The node is
// read after its latch watch is added (at position at), so a change after
// the read is reported by the watch, and one in between either shows in
// the read or is an event after at.
func (t *watchTable) prepareAgain(ctx context.Context, path string, kind watchKind, known uint64, hold bool) (*watchGen, error) {
	key := watchKey{path, keyKind(kind)}
	t.mu.Lock()
	e := t.byKey[key]
	catchUp := false
	if e == nil {
		children := t.c.childCatchUp(key, known)
		var err error
		if e, err = t.addEntryLocked(ctx, key, children); err != nil {
			t.mu.Unlock()
			return nil, err
		}
		catchUp = children != nil
	}
	g := addGenLocked(e, kind, catchUp, hold)
	t.mu.Unlock()

	n, err := t.c.readNode(nil, path, false)
	found := err == nil
	if err != nil && !isCode(err, api.CodeNotFound) {
		t.drop(g)
		return nil, err
	}
	if typ, fire := t.c.missed(kind, path, n, found, known); fire {
		t.mu.Lock()
		t.triggerLocked(g, typ, path, e.home, n.Index)
		t.mu.Unlock()
	}
	return g, nil
}

// missed reports whether a one-shot watch of kind on path, whose node
// reads as n (found: it exists), set again by setWatches for a client that saw every change
// up to known, missed a change, and which notification tells it (see
// prepareAgain). It is conservative (fires) where the node's state cannot
// tell: a node whose pzxid is not recorded (made by a binary that kept
// none, its children unchanged since), and, on a cluster of several
// shards, a node outside shard 0 (known is an index of shard 0's log).
// Of a node whose children live in another shard, only its deletion: the
// latch watch's record in the children's shard reports their changes
// (childCatchUp).
func (c *conn) missed(kind watchKind, path string, n server.NodeView, found bool, known uint64) (zkproto.EventType, bool) {
	since := func(index uint64) bool {
		return index == 0 || index > known || (c.l.sharded && c.l.srv.ShardOf(path) != 0)
	}
	switch kind {
	case kindExist:
		return zkproto.EventNodeCreated, found
	case kindData:
		if !found {
			return zkproto.EventNodeDeleted, true
		}
		return zkproto.EventNodeDataChanged, since(n.ModifiedIndex)
	case kindChild:
		if !found {
			return zkproto.EventNodeDeleted, true
		}
		if c.l.sharded && c.l.srv.ChildShardOf(path) != c.l.srv.ShardOf(path) {
			return 0, false
		}
		return zkproto.EventNodeChildrenChanged, since(n.ChildrenModifiedIndex)
	}
	return 0, false
}

// childCatchUp is, for a child watch set again by setWatches on a node
// whose children live in another shard than the node, the known index of
// the children's shard: known there if it is shard 0 (a session's zxid is
// an index of shard 0's log), else 1 (any change there counts, the
// client's position in that log being unknown). The latch watch's record
// in that shard then reports at once the children's latest change after
// it, conservatively when that shard's recent history does not reach back
// so far (internal/watch); its events there are all changes of the
// children. nil for every other watch: the node's state tells (missed).
func (c *conn) childCatchUp(key watchKey, known uint64) map[int]uint64 {
	if !c.l.sharded || key.kind != kindChild {
		return nil
	}
	srv := c.l.srv
	children := srv.ChildShardOf(key.path)
	if children == srv.ShardOf(key.path) {
		return nil
	}
	if children != 0 {
		known = 1
	}
	return map[int]uint64{children: known}
}

// addGenLocked adds a generation of kind to e, not yet armed.
func addGenLocked(e *watchEntry, kind watchKind, catchUp, hold bool) *watchGen {
	g := &watchGen{e: e, kind: kind, after: e.at, catchUp: catchUp, held: hold}
	e.gens = append(e.gens, g)
	return g
}

// addEntryLocked adds the latch watch of key and its entry. known, if not
// nil, is the known index of some of the shards the watch covers
// (childCatchUp): in those the latch watch reports at once the latest
// change after it.
func (t *watchTable) addEntryLocked(ctx context.Context, key watchKey, known map[int]uint64) (*watchEntry, error) {
	srv := t.c.l.srv
	req := server.WatchRequest{Path: key.path, Recursive: key.kind == kindRecursive, Persistent: true, KnownIndexes: known}
	w, err := srv.Watch(ctx, t.c.session, req)
	if err != nil {
		return nil, err
	}
	id, err := api.ParseID(w.WatchID)
	if err != nil {
		return nil, err
	}
	e := &watchEntry{key: key, id: id, home: w.Shard, at: watchPos(w.Shard, w.Index, w.Indexes)}
	t.byKey[key], t.byID[id] = e, e
	return e, nil
}

// arm starts reporting the changes after position after, beginning with
// those that came while the watch was prepared.
func (t *watchTable) arm(g *watchGen, after shardPos) {
	if g == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g.after, g.armed = after, true
	pending := g.pending
	g.pending = nil
	for _, ev := range pending {
		t.fireLocked(g, ev) // owed again if it fires held
		t.paidLocked(ev.Shard, ev.Index)
	}
	t.settleOwedLocked()
	t.pruneLocked(g.e)
}

// armAs arms g as a watch of kind: exists learns only from its read
// whether it sets a data or an exist watch (one entry keeps both).
func (t *watchTable) armAs(g *watchGen, kind watchKind, after shardPos) {
	if g == nil {
		return
	}
	t.mu.Lock()
	g.kind = kind
	t.mu.Unlock()
	t.arm(g, after)
}

// drop removes a watch that must not be set (its read failed).
func (t *watchTable) drop(g *watchGen) {
	if g == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g.fired = true // never reports
	for _, ev := range g.pending {
		t.paidLocked(ev.Shard, ev.Index)
	}
	t.settleOwedLocked()
	g.pending = nil
	t.pruneLocked(g.e)
}

// dispatch routes one latch event to the watches of its latch watch.
func (t *watchTable) dispatch(ev api.Event) {
	id, err := api.ParseID(ev.WatchID)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	if e == nil {
		return // a watch that fired or was removed
	}
	for _, g := range e.gens {
		if !g.armed {
			g.pending = append(g.pending, ev)
			t.oweLocked(ev.Shard, ev.Index)
			continue
		}
		t.fireLocked(g, ev)
	}
	t.pruneLocked(e)
}

// fireLocked applies ZooKeeper's trigger rules to one change.
func (t *watchTable) fireLocked(g *watchGen, ev api.Event) {
	if g.fired {
		return
	}
	home := g.e.home
	catchUp := g.catchUp && ev.Shard != home && ev.Index == g.e.at.of(home, ev.Shard)
	if ev.Index <= g.after.of(home, ev.Shard) && !catchUp {
		return
	}
	typ, ok := eventType(g.kind, ev.Event, catchUp)
	if !ok {
		return
	}
	t.triggerLocked(g, typ, ev.Path, ev.Shard, ev.Index)
}

// triggerLocked fires g with the notification typ of path, for the change
// at index of shard: at once, or once the reply of the request that set g
// is sent.
func (t *watchTable) triggerLocked(g *watchGen, typ zkproto.EventType, path string, shard int, index uint64) {
	g.fired = g.kind.oneShot()
	if g.held {
		g.notes = append(g.notes, heldNote{typ, path, shard, index})
		t.oweLocked(shard, index)
		return
	}
	t.notifyLocked(typ, path, shard, index)
}

// pruneLocked forgets the generations of e that fired, and e with its
// latch watch once none is left.
func (t *watchTable) pruneLocked(e *watchEntry) {
	live := e.gens[:0]
	for _, g := range e.gens {
		if !g.fired {
			live = append(live, g)
		}
	}
	clear(e.gens[len(live):])
	e.gens = live
	if len(live) == 0 && t.byID[e.id] == e {
		t.removeLocked(e)
	}
}

// release sends the reply of the request that set the watches gens (the
// function reply, unless nil: it was sent already), then the notifications
// the watches held, all under the table's lock, so that no notification of
// a later change goes out between the reply and the held ones, and lets
// them notify directly from now on. through, if not nil, is an index per shard through which every change
// has been dispatched to the table: the watches of one path and kind that
// wait, released, for a change after a position within it wait for the
// same next change, and are kept as one (so a client that sets one watch
// again and again on a node that does not change holds one, as in
// ZooKeeper).
func (t *watchTable) release(gens []*watchGen, through []uint64, reply func()) {
	if len(gens) == 0 {
		if reply != nil {
			reply()
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if reply != nil {
		reply() // under t.mu: no notification between it and the held ones
	}
	var sent map[heldNote]bool // made for the first held notification
	for _, g := range gens {
		g.held = false
		for _, n := range g.notes {
			// Not deduplicated against notifications sent before the
			// reply: the client did not hold this watch then.
			if sent == nil {
				sent = map[heldNote]bool{}
			}
			if !sent[n] {
				sent[n] = true
				t.notify(n.typ, n.path)
			}
		}
		for _, n := range g.notes { // sent: the zxids may pass them
			t.paidLocked(n.shard, n.index)
		}
		g.notes = nil
	}
	t.settleOwedLocked()
	if through == nil {
		return
	}
	for _, g := range gens {
		if t.byID[g.e.id] == g.e {
			t.mergeLocked(g.e, through)
		}
	}
}

// mergeLocked keeps one of e's released one-shot generations waiting for a
// change after a position within through (see release): no change up to
// through fired them, so each waits for the first change after through.
func (t *watchTable) mergeLocked(e *watchEntry, through []uint64) {
	var keep *watchGen
	for _, g := range e.gens {
		if !mergeable(g, through) {
			continue
		}
		if keep == nil {
			keep = g
			keep.after = g.after.raisedTo(e.home, through)
			continue
		}
		g.fired = true
	}
	t.pruneLocked(e)
}

func mergeable(g *watchGen, through []uint64) bool {
	return g.armed && !g.held && !g.fired && !g.catchUp && g.kind.oneShot() && g.after.within(g.e.home, through)
}

// eventType maps a latch event on a watch of kind to the ZooKeeper event
// it triggers, if any. A catch-up event is the report, by a child watch's
// record in its children's shard, that they changed while the client was
// away (childCatchUp).
func eventType(kind watchKind, event string, catchUp bool) (zkproto.EventType, bool) {
	if catchUp {
		return zkproto.EventNodeChildrenChanged, kind == kindChild
	}
	switch event {
	case api.EventCreated:
		return zkproto.EventNodeCreated, kind != kindChild
	case api.EventChanged:
		return zkproto.EventNodeDataChanged, kind != kindChild
	case api.EventDeleted:
		return zkproto.EventNodeDeleted, true
	case api.EventChildrenChanged:
		return zkproto.EventNodeChildrenChanged, kind == kindChild || kind == kindPersistent
	}
	return 0, false
}

// notifyLocked sends a notification unless the same one went for the
// change at index of shard.
func (t *watchTable) notifyLocked(typ zkproto.EventType, path string, shard int, index uint64) {
	if index != t.atIndex || shard != t.atShard {
		t.atShard, t.atIndex = shard, index
		clear(t.sentAt)
	}
	n := notified{path, typ}
	if t.sentAt[n] {
		return
	}
	t.sentAt[n] = true
	t.notify(typ, path)
}

// removeLocked forgets an entry and cancels its latch watch.
func (t *watchTable) removeLocked(e *watchEntry) {
	delete(t.byKey, e.key)
	delete(t.byID, e.id)
	t.cancel(e.id)
}

// has reports whether the connection holds a watch on path of WatcherType
// typ.
func (t *watchTable) has(path string, typ int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.byKey {
		if k.path == path && k.kind.matches(typ) {
			return true
		}
	}
	return false
}

// remove removes the connection's watches on path of WatcherType typ and
// reports whether there were any.
func (t *watchTable) remove(path string, typ int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	found := false
	for k, e := range t.byKey {
		if k.path == path && k.kind.matches(typ) {
			t.removeLocked(e)
			found = true
		}
	}
	return found
}

// cancelAll removes every watch (the connection ends).
func (t *watchTable) cancelAll() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.byKey {
		t.removeLocked(e)
	}
}

// pumpEvents waits for the session to be ready (auth.go), then hands the
// session's events to the watch table until the stream ends, then ends the
// connection: the session ended (the client learns it when it reconnects),
// another connection took the stream, or the connection fell too far
// behind; the client reconnects and sets its watches again. After a
// closeSession on this connection the pipeline closes it instead, once the
// reply is sent. It takes the queued events itself (the stream's Take),
// every one queued at once: no goroutine and no hand-off between the watch
// registry and the connection.
func (c *conn) pumpEvents() {
	defer close(c.pumpDone)
	select {
	case <-c.ready:
	case <-c.ctx.Done():
		return
	}
	var taken [eventBatch]server.Delivery
	for c.ctx.Err() == nil {
		n, ended := c.stream.Take(taken[:])
		if ended {
			c.l.log.Debug("zk: event stream ended", "session", c.session, "reason", c.stream.Reason())
			if !c.closing.Load() {
				c.close()
			}
			return
		}
		for _, d := range taken[:n] {
			c.watches.dispatch(d.Event())
		}
		clear(taken[:n]) // keeps no event alive while the stream idles
		if n > 0 {
			c.handled.Add(uint64(n))
			select {
			case c.progress <- struct{}{}:
			default:
			}
		}
		if n == len(taken) {
			continue // more may be queued
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.stream.Ready():
		case <-c.stream.Done():
		}
	}
}

// eventBatch is the most events pumpEvents takes from its stream at once.
const eventBatch = 32

// backlogger is the part of an event stream that tells how many events it
// will have handed over once it has handed over those queued now
// (watch.Stream's Backlog).
type backlogger interface{ Backlog() uint64 }

// awaitNotifications waits until the connection has sent the notification
// of every change its member had applied when it was called, so that a
// reply sent after it never overtakes the notification of a change the
// request could see, as ZooKeeper orders them: the registry queues a
// change's events while it applies the change, before any read sees it,
// so once pumpEvents has dispatched as many events as the stream's Backlog
// counts now, every such notification is on the wire (or held by a watch
// whose request's reply is not sent yet). With track it returns the
// applied index of each shard it waited for: every change at or below
// them has been dispatched to the watch table. Once done it raises
// c.through to shard 0's applied index of when it was called (the zxids a
// frame may carry, conn.zxidLocked). It gives up, returning nil and
// leaving c.through, when the stream or the connection ends (the client
// then reconnects and sets its watches again) or after the session
// timeout (a stream stuck that long is a bug; the reply is sent then
// rather than never).
func (c *conn) awaitNotifications(track bool) []uint64 {
	b, ok := c.stream.(backlogger)
	if !ok {
		return nil
	}
	var applied []uint64
	if track {
		applied = c.appliedIndexes()
	}
	zxid := c.l.srv.AppliedIndex() // before the backlog, which counts its events
	target := b.Backlog()
	if c.handled.Load() >= target {
		raise(&c.through, zxid)
		return applied
	}
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for c.handled.Load() < target {
		select {
		case <-c.progress:
		case <-c.pumpDone:
			return nil
		case <-c.ctx.Done():
			return nil
		case <-timer.C:
			c.l.log.Warn("zk: notifications not sent within the session timeout; replying anyway", "session", c.session)
			return nil
		}
	}
	raise(&c.through, zxid)
	return applied
}

// appliedIndexes is the member's applied index of each shard.
func (c *conn) appliedIndexes() []uint64 {
	if !c.l.sharded {
		return []uint64{c.l.srv.AppliedIndex()}
	}
	out := make([]uint64, c.l.srv.Shards())
	for shard := range out {
		out[shard] = c.l.srv.ShardApplied(shard)
	}
	return out
}

// notify sends a watch notification (xid -1).
func (c *conn) notify(typ zkproto.EventType, path string) {
	ev := &zkproto.WatcherEvent{Type: typ, State: zkproto.StateSyncConnected, Path: path}
	_ = c.send(zkproto.ReplyHeader{Xid: zkproto.XidNotification}, ev)
}
