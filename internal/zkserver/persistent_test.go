package zkserver

import (
	"testing"
	"time"

	"github.com/latch-io/latch/internal/zkproto"
)

// event reads frames until a notification comes, failing on a reply.
func (r *rawClient) event() zkproto.WatcherEvent {
	r.t.Helper()
	h, rest := r.reply()
	if h.Xid != zkproto.XidNotification {
		r.t.Fatalf("got reply xid %d, want a notification", h.Xid)
	}
	return decodeEvent(r.t, rest)
}

// decodeEvent decodes the body of a notification.
func decodeEvent(t *testing.T, body []byte) zkproto.WatcherEvent {
	t.Helper()
	var ev zkproto.WatcherEvent
	if err := zkproto.Decode(body, &ev, "WatcherEvent"); err != nil {
		t.Fatal(err)
	}
	return ev
}

func mustOK(t *testing.T, what string, h zkproto.ReplyHeader) {
	t.Helper()
	if h.Err != zkproto.ErrOK {
		t.Fatalf("%s: error %d", what, h.Err)
	}
}

// mustDecode fails unless h is OK (what names the request), and decodes
// body into out, a record of the jute type name.
func mustDecode(t *testing.T, what string, h zkproto.ReplyHeader, body []byte, out zkproto.Record, name string) {
	t.Helper()
	mustOK(t, what, h)
	if err := zkproto.Decode(body, out, name); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func create(path string) *zkproto.CreateRequest {
	return &zkproto.CreateRequest{Path: path, ACL: worldAnyone}
}

// TestPersistentWatches: addWatch PERSISTENT fires for every change of the
// node (children included) and stays; PERSISTENT_RECURSIVE fires for the
// node and everything below, without NodeChildrenChanged; checkWatches and
// removeWatches see and remove them.
func TestPersistentWatches(t *testing.T) {
	c := startZK(t, 1, Config{})
	w := dialRaw(t, c.addrs[0])
	w.session()
	writer := dialRaw(t, c.addrs[0])
	writer.session()
	mustOK(t, "create /pw", firstHeader(writer.call(zkproto.OpCreate, create("/pw"))))
	mustOK(t, "addWatch persistent", firstHeader(w.call(zkproto.OpAddWatch, &zkproto.PathTypeRequest{Path: "/pw", Type: 0})))
	mustOK(t, "addWatch recursive", firstHeader(w.call(zkproto.OpAddWatch, &zkproto.PathTypeRequest{Path: "/rw", Type: 1})))
	mustOK(t, "checkWatches", firstHeader(w.call(zkproto.OpCheckWatches, &zkproto.PathTypeRequest{Path: "/pw", Type: watcherPersistent})))
	if h, _ := w.call(zkproto.OpCheckWatches, &zkproto.PathTypeRequest{Path: "/pw", Type: watcherData}); h.Err != zkproto.ErrNoWatcher {
		t.Fatalf("checkWatches data on /pw = %d, want NoWatcher", h.Err)
	}

	writes := []struct {
		op   zkproto.OpCode
		body zkproto.Record
		want zkproto.WatcherEvent
	}{
		{zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/pw", Data: []byte("1"), Version: -1}, zkproto.WatcherEvent{Type: zkproto.EventNodeDataChanged, Path: "/pw"}},
		{zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/pw", Data: []byte("2"), Version: -1}, zkproto.WatcherEvent{Type: zkproto.EventNodeDataChanged, Path: "/pw"}},
		{zkproto.OpCreate, create("/pw/kid"), zkproto.WatcherEvent{Type: zkproto.EventNodeChildrenChanged, Path: "/pw"}},
		{zkproto.OpCreate, create("/rw"), zkproto.WatcherEvent{Type: zkproto.EventNodeCreated, Path: "/rw"}},
		{zkproto.OpCreate, create("/rw/a"), zkproto.WatcherEvent{Type: zkproto.EventNodeCreated, Path: "/rw/a"}},
		{zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/rw/a", Data: []byte("x"), Version: -1}, zkproto.WatcherEvent{Type: zkproto.EventNodeDataChanged, Path: "/rw/a"}},
		{zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/rw/a", Version: -1}, zkproto.WatcherEvent{Type: zkproto.EventNodeDeleted, Path: "/rw/a"}},
	}
	for _, step := range writes {
		mustOK(t, "write", firstHeader(writer.call(step.op, step.body)))
		ev := w.event()
		if ev.Type != step.want.Type || ev.Path != step.want.Path || ev.State != zkproto.StateSyncConnected {
			t.Fatalf("after a write, event %+v, want %+v", ev, step.want)
		}
	}
	mustOK(t, "removeWatches", firstHeader(w.call(zkproto.OpRemoveWatches, &zkproto.PathTypeRequest{Path: "/pw", Type: watcherAny})))
	if h, _ := w.call(zkproto.OpRemoveWatches, &zkproto.PathTypeRequest{Path: "/pw", Type: watcherAny}); h.Err != zkproto.ErrNoWatcher {
		t.Fatalf("second removeWatches = %d, want NoWatcher", h.Err)
	}
	mustOK(t, "set after remove", firstHeader(writer.call(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/pw", Data: []byte("3"), Version: -1})))
	// The next notification must be the recursive watch's, not /pw's.
	mustOK(t, "create /rw/b", firstHeader(writer.call(zkproto.OpCreate, create("/rw/b"))))
	if ev := w.event(); ev.Path != "/rw/b" {
		t.Fatalf("event %+v after removeWatches of /pw: want only /rw/b", ev)
	}
}

func firstHeader(h zkproto.ReplyHeader, _ []byte) zkproto.ReplyHeader { return h }

// TestSetWatchesAfterReconnect: the watches a client sets again with
// setWatches report at once what changed while it was away (after
// relativeZxid), and keep watching.
func TestSetWatchesAfterReconnect(t *testing.T) {
	c := startZK(t, 1, Config{})
	writer := dialRaw(t, c.addrs[0])
	writer.session()
	for _, p := range []string{"/sw", "/sw/data", "/sw/kids", "/sw/gone", "/sw/quiet"} {
		mustOK(t, "create "+p, firstHeader(writer.call(zkproto.OpCreate, create(p))))
	}
	h, _ := writer.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/sw"})
	rel := h.Zxid
	mustOK(t, "set", firstHeader(writer.call(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/sw/data", Data: []byte("x"), Version: -1})))
	mustOK(t, "create kid", firstHeader(writer.call(zkproto.OpCreate, create("/sw/kids/k"))))
	mustOK(t, "delete", firstHeader(writer.call(zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/sw/gone", Version: -1})))
	mustOK(t, "create new", firstHeader(writer.call(zkproto.OpCreate, create("/sw/new"))))

	r := dialRaw(t, c.addrs[0])
	r.session()
	xid := r.sendXid(zkproto.XidSetWatches, zkproto.OpSetWatches2, &zkproto.SetWatches{
		Has2: true, RelativeZxid: rel,
		DataWatches:  []string{"/sw/data", "/sw/gone", "/sw/quiet"},
		ExistWatches: []string{"/sw/new", "/sw/never"},
		ChildWatches: []string{"/sw/kids"},
	})
	want := map[string]zkproto.EventType{
		"/sw/data": zkproto.EventNodeDataChanged, "/sw/gone": zkproto.EventNodeDeleted,
		"/sw/new": zkproto.EventNodeCreated, "/sw/kids": zkproto.EventNodeChildrenChanged,
	}
	got := map[string]zkproto.EventType{}
	replied := false
	deadline := time.Now().Add(10 * time.Second)
	for (!replied || len(got) < len(want)) && time.Now().Before(deadline) {
		h, rest := r.reply()
		if h.Xid == xid {
			mustOK(t, "setWatches2", h)
			replied = true
			continue
		}
		ev := decodeEvent(t, rest)
		if _, dup := got[ev.Path]; dup {
			t.Fatalf("second event for %s: %+v", ev.Path, ev)
		}
		got[ev.Path] = ev.Type
	}
	for p, typ := range want {
		if got[p] != typ {
			t.Fatalf("after setWatches: events %v, want %v", got, want)
		}
	}
	if _, ok := got["/sw/quiet"]; ok {
		t.Fatalf("unchanged /sw/quiet reported: %v", got)
	}
	// The watches that did not fire are still set.
	mustOK(t, "set quiet", firstHeader(writer.call(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/sw/quiet", Data: []byte("y"), Version: -1})))
	if ev := r.event(); ev.Path != "/sw/quiet" || ev.Type != zkproto.EventNodeDataChanged {
		t.Fatalf("event %+v, want NodeDataChanged /sw/quiet", ev)
	}
	mustOK(t, "create never", firstHeader(writer.call(zkproto.OpCreate, create("/sw/never"))))
	if ev := r.event(); ev.Path != "/sw/never" || ev.Type != zkproto.EventNodeCreated {
		t.Fatalf("event %+v, want NodeCreated /sw/never", ev)
	}
}

// TestSessionExpiry: a session whose client stops talking expires; its
// connection is closed, and a reconnect with its id gets timeout 0, which
// clients report as expiry; its ephemeral nodes are gone.
func TestSessionExpiry(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	resp, err := r.connect(zkproto.ConnectRequest{TimeOut: 1000, Passwd: make([]byte, 16)})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, "create ephemeral", firstHeader(r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/eph", ACL: worldAnyone, Flags: zkproto.ModeEphemeral})))
	// Silence: no pings. The server ends the connection once the session expired.
	_ = r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if !r.closed() {
		t.Fatalf("connection of a silent session not closed")
	}
	again := dialRaw(t, c.addrs[0])
	got, err := again.connect(zkproto.ConnectRequest{TimeOut: 1000, SessionID: resp.SessionID, Passwd: resp.Passwd})
	if err != nil || got.TimeOut != 0 {
		t.Fatalf("reconnect to an expired session = %+v, %v; want timeout 0", got, err)
	}
	check := dialRaw(t, c.addrs[0])
	check.session()
	if h, _ := check.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/eph"}); h.Err != zkproto.ErrNoNode {
		t.Fatalf("ephemeral of the expired session: exists = %d, want NoNode", h.Err)
	}
}

// TestCloseSession: closeSession (-11) ends the session at once: its
// ephemeral nodes go and the connection closes.
func TestCloseSession(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	mustOK(t, "create ephemeral", firstHeader(r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/bye", ACL: worldAnyone, Flags: zkproto.ModeEphemeral})))
	mustOK(t, "closeSession", firstHeader(r.call(zkproto.OpCloseSession, nil)))
	if !r.closed() {
		t.Fatal("connection open after closeSession")
	}
	check := dialRaw(t, c.addrs[0])
	check.session()
	if h, _ := check.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/bye"}); h.Err != zkproto.ErrNoNode {
		t.Fatalf("ephemeral after closeSession: exists = %d, want NoNode", h.Err)
	}
}
