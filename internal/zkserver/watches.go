package zkserver

import (
	"context"
	"sync"
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
	kind watchKind
}

// watchEntry is one ZooKeeper watch, kept over one persistent latch watch
// of the session (exact, or recursive for kindRecursive): the latch watch
// reports every change, and the entry applies ZooKeeper's trigger rules.
type watchEntry struct {
	key   watchKey
	id    uint64 // the latch watch
	at    uint64 // the applied index the latch watch was added at
	after uint64 // changes at or below this index are not reported
	armed bool
	// pending holds the events that came before the entry was armed (the
	// latch watch is added before the read that sets a ZooKeeper watch, so
	// that no change between the two is lost).
	pending []api.Event
	// catchUp: added by setWatches with a relativeZxid: an event at index
	// at is the latch registry's report that the node changed while the
	// client was away (its latest change), not a change at that index.
	catchUp bool
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
	c *conn

	mu      sync.Mutex
	byKey   map[watchKey]*watchEntry
	byID    map[uint64]*watchEntry
	atIndex uint64            // the index of the notifications in sentAt
	sentAt  map[notified]bool // notifications sent at atIndex
}

func newWatchTable(c *conn) *watchTable {
	return &watchTable{c: c, byKey: map[watchKey]*watchEntry{}, byID: map[uint64]*watchEntry{}, sentAt: map[notified]bool{}}
}

// prepare adds the latch watch for a ZooKeeper watch of kind on path and
// returns its entry, not yet armed: the caller reads, then arms it with the
// read's index (or drops it). It returns nil and no error if the connection
// already holds that watch: ZooKeeper keeps one watch per path and type.
func (t *watchTable) prepare(ctx context.Context, path string, kind watchKind, known uint64) (*watchEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := watchKey{path, kind}
	if t.byKey[key] != nil {
		return nil, nil
	}
	if t.c.l.sharded && !servedInShardZero(t.c.l.srv, path, kind) {
		return nil, api.Errorf(api.CodeInvalidArgument,
			"with several shards the ZooKeeper port serves watches on nodes of shard 0 only; %s is elsewhere (docs/zookeeper.md)", path)
	}
	w, err := t.c.l.srv.Watch(ctx, t.c.session, server.WatchRequest{
		Path: path, Recursive: kind == kindRecursive, Persistent: true, KnownIndex: known,
	})
	if err != nil {
		return nil, err
	}
	id, err := api.ParseID(w.WatchID)
	if err != nil {
		return nil, err
	}
	e := &watchEntry{key: key, id: id, at: w.Index, after: w.Index, catchUp: known > 0}
	t.byKey[key], t.byID[id] = e, e
	return e, nil
}

// servedInShardZero reports whether a ZooKeeper watch of kind on path sees
// only changes of shard 0, the one whose indexes a session's zxid follows
// on a sharded cluster: a data or exist watch needs the node's shard, a
// child watch the children's too; persistent and recursive watches span
// more and are never served there.
func servedInShardZero(srv *server.Server, path string, kind watchKind) bool {
	switch kind {
	case kindData, kindExist:
		return srv.ShardOf(path) == 0
	case kindChild:
		return srv.ShardOf(path) == 0 && srv.ChildShardOf(path) == 0
	}
	return false
}

// arm starts reporting the changes after index after, beginning with those
// that came while the entry was prepared.
func (t *watchTable) arm(e *watchEntry, after uint64) {
	if e == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[e.id] != e {
		return
	}
	e.after, e.armed = after, true
	pending := e.pending
	e.pending = nil
	for _, ev := range pending {
		if t.byID[e.id] != e {
			return // a one-shot watch fired
		}
		t.handleLocked(e, ev)
	}
}

// armAs arms e as a watch of kind (exists learns only from its read
// whether it sets a data or an exist watch); if the connection holds that
// watch already, e is dropped.
func (t *watchTable) armAs(e *watchEntry, kind watchKind, after uint64) {
	if e == nil {
		return
	}
	t.mu.Lock()
	if t.byID[e.id] == e && e.key.kind != kind {
		key := watchKey{e.key.path, kind}
		if t.byKey[key] != nil {
			t.removeLocked(e)
			t.mu.Unlock()
			return
		}
		delete(t.byKey, e.key)
		e.key = key
		t.byKey[key] = e
	}
	t.mu.Unlock()
	t.arm(e, after)
}

// drop removes an entry that must not be set (its read failed).
func (t *watchTable) drop(e *watchEntry) {
	if e == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[e.id] == e {
		t.removeLocked(e)
	}
}

// dispatch routes one latch event to the entry of its watch.
func (t *watchTable) dispatch(ev api.Event) {
	id, err := api.ParseID(ev.WatchID)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	switch {
	case e == nil:
		return // a watch that fired or was removed
	case !e.armed:
		e.pending = append(e.pending, ev)
	default:
		t.handleLocked(e, ev)
	}
}

// handleLocked applies ZooKeeper's trigger rules to one change.
func (t *watchTable) handleLocked(e *watchEntry, ev api.Event) {
	catchUp := e.catchUp && ev.Index == e.at
	if ev.Index <= e.after && !catchUp {
		return
	}
	typ, ok := eventType(e.key.kind, ev.Event, catchUp)
	if !ok {
		return
	}
	if e.key.kind.oneShot() {
		t.removeLocked(e)
	}
	t.notifyLocked(typ, ev.Path, ev.Index)
}

// eventType maps a latch event on a watch of kind to the ZooKeeper event
// it triggers, if any.
func eventType(kind watchKind, event string, catchUp bool) (zkproto.EventType, bool) {
	if catchUp {
		return catchUpType(kind, event)
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

// catchUpType maps the latest change a watch missed while its client was
// away, as ZooKeeper's setWatches does: a data watch reports the node
// deleted or changed, an exist watch its creation, a child watch the node
// deleted or its children changed (conservatively: latch does not record
// which kind of change it was when the history no longer reaches back).
func catchUpType(kind watchKind, event string) (zkproto.EventType, bool) {
	deleted := event == api.EventDeleted
	switch kind {
	case kindData:
		if deleted {
			return zkproto.EventNodeDeleted, true
		}
		return zkproto.EventNodeDataChanged, true
	case kindExist:
		return zkproto.EventNodeCreated, !deleted
	case kindChild:
		if deleted {
			return zkproto.EventNodeDeleted, true
		}
		return zkproto.EventNodeChildrenChanged, true
	}
	return eventType(kind, event, false)
}

// notifyLocked sends a notification unless the same one went at index.
func (t *watchTable) notifyLocked(typ zkproto.EventType, path string, index uint64) {
	if index != t.atIndex {
		t.atIndex = index
		clear(t.sentAt)
	}
	n := notified{path, typ}
	if t.sentAt[n] {
		return
	}
	t.sentAt[n] = true
	t.c.notify(typ, path)
}

// removeLocked forgets an entry and cancels its latch watch.
func (t *watchTable) removeLocked(e *watchEntry) {
	delete(t.byKey, e.key)
	delete(t.byID, e.id)
	_ = t.c.l.srv.CancelWatch(t.c.session, e.id)
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
// session's events to the watch table until the
// stream ends, then ends the connection: the session ended (the client
// learns it when it reconnects), another connection took the stream, or
// the connection fell too far behind; the client reconnects and sets its
// watches again. After a closeSession on this connection the pipeline
// closes it instead, once the reply is sent.
func (c *conn) pumpEvents() {
	defer close(c.pumpDone)
	select {
	case <-c.ready:
	case <-c.ctx.Done():
		return
	}
	events := c.stream.Events()
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				c.l.log.Debug("zk: event stream ended", "session", c.session, "reason", c.stream.Reason())
				if !c.closing.Load() {
					c.close()
				}
				return
			}
			c.watches.dispatch(ev)
			c.handled.Add(1)
			select {
			case c.progress <- struct{}{}:
			default:
			}
		}
	}
}

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
// counts now, every such notification is on the wire. It gives up when the
// stream or the connection ends (the client then reconnects and sets its
// watches again) or after the session timeout (a stream stuck that long is
// a bug; the reply is sent then rather than never).
func (c *conn) awaitNotifications() {
	b, ok := c.stream.(backlogger)
	if !ok {
		return
	}
	target := b.Backlog()
	if c.handled.Load() >= target {
		return
	}
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for c.handled.Load() < target {
		select {
		case <-c.progress:
		case <-c.pumpDone:
			return
		case <-c.ctx.Done():
			return
		case <-timer.C:
			c.l.log.Warn("zk: notifications not sent within the session timeout; replying anyway", "session", c.session)
			return
		}
	}
}

// notify sends a watch notification (xid -1).
func (c *conn) notify(typ zkproto.EventType, path string) {
	ev := &zkproto.WatcherEvent{Type: typ, State: zkproto.StateSyncConnected, Path: path}
	_ = c.send(zkproto.ReplyHeader{Xid: zkproto.XidNotification}, ev)
}
