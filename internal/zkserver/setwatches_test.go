package zkserver

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/zkproto"
)

// rewatchCase is one watch a client sets again with setWatches2 after a
// reconnect in reconnectWithWatches: the notifications it must get at
// once (catchUp) and after the later writes (later), as ZooKeeper's
// DataTree.setWatches decides them: from the node's state against
// relativeZxid (a data watch: NodeDeleted if gone, NodeDataChanged if its
// mzxid is past it; an exist watch: NodeCreated if the node is there; a
// child watch: NodeDeleted if gone, NodeChildrenChanged if its pzxid is
// past it; else the watch is set again), and persistent watches set again
// with no notification at all.
type rewatchCase struct {
	name    string
	path    string // the watched path; events at or below it are the case's
	kind    watchKind
	catchUp []string
	later   []string
}

var rewatchCases = []rewatchCase{
	// (a) Only a child was added: the node's data did not change.
	{name: "data watch, child added", path: "/cu/kid-added", kind: kindData,
		later: []string{"NodeDataChanged /cu/kid-added"}},
	// (b) Only the data was set: the children did not change.
	{name: "child watch, data set", path: "/cu/data-set", kind: kindChild,
		later: []string{"NodeChildrenChanged /cu/data-set"}},
	// (c) Persistent watches are set again and report nothing missed.
	{name: "persistent watch", path: "/cu/p", kind: kindPersistent,
		later: []string{"NodeDataChanged /cu/p"}},
	{name: "persistent recursive watch", path: "/cu/r", kind: kindRecursive,
		later: []string{"NodeCreated /cu/r/z"}},
	// (d) An exist watch fires for a node that is there, whatever its
	// zxids (here created before relativeZxid).
	{name: "exist watch, created before relativeZxid", path: "/cu/early", kind: kindExist,
		catchUp: []string{"NodeCreated /cu/early"}},
	// Controls.
	{name: "data watch, data set", path: "/cu/changed", kind: kindData,
		catchUp: []string{"NodeDataChanged /cu/changed"}},
	{name: "data watch, deleted and created again", path: "/cu/recreated", kind: kindData,
		catchUp: []string{"NodeDataChanged /cu/recreated"}},
	{name: "data watch, deleted", path: "/cu/gone", kind: kindData,
		catchUp: []string{"NodeDeleted /cu/gone"}},
	{name: "child watch, child added", path: "/cu/grown", kind: kindChild,
		catchUp: []string{"NodeChildrenChanged /cu/grown"}},
	{name: "child watch, deleted", path: "/cu/gone-kids", kind: kindChild,
		catchUp: []string{"NodeDeleted /cu/gone-kids"}},
	{name: "exist watch, still missing", path: "/cu/later", kind: kindExist,
		later: []string{"NodeCreated /cu/later"}},
}

// eventName names a notification as ZooKeeper's EventType does.
func eventName(ev zkproto.WatcherEvent) string {
	names := map[zkproto.EventType]string{
		zkproto.EventNodeCreated: "NodeCreated", zkproto.EventNodeDeleted: "NodeDeleted",
		zkproto.EventNodeDataChanged: "NodeDataChanged", zkproto.EventNodeChildrenChanged: "NodeChildrenChanged",
	}
	name, ok := names[ev.Type]
	if !ok {
		name = fmt.Sprint(ev.Type)
	}
	return name + " " + ev.Path
}

// notificationsUntil reads frames until the reply of xid and returns the
// notifications that came before it, failing on an error reply. Other
// replies (of requests sent before xid) are checked for OK.
func notificationsUntil(r *rawClient, xid int32) []string {
	r.t.Helper()
	var events []string
	for {
		h, rest := r.reply()
		if h.Xid != zkproto.XidNotification {
			mustOK(r.t, fmt.Sprintf("reply of xid %d", h.Xid), h)
			if h.Xid == xid {
				return events
			}
			continue
		}
		events = append(events, eventName(decodeEvent(r.t, rest)))
	}
}

// reconnectWithWatches runs the reconnect of rewatchCases against the
// ZooKeeper-protocol server at addr (latch or a real ZooKeeper): a client
// sets its watches, its connection drops, another client changes the
// nodes, the client reconnects with its session and lastZxidSeen and sets
// its watches again with setWatches2 and that zxid as relativeZxid. It
// returns the notifications the client got for the setWatches (before
// the reply of its next request), then those of later writes.
func reconnectWithWatches(t *testing.T, addr string) (catchUp, later []string) {
	t.Helper()
	writer := firstSession(t, addr)
	write := func(op zkproto.OpCode, body zkproto.Record) {
		t.Helper()
		mustOK(t, fmt.Sprintf("write %d %+v", op, body), firstHeader(writer.call(op, body)))
	}
	setData := func(path string) {
		t.Helper()
		write(zkproto.OpSetData, &zkproto.SetDataRequest{Path: path, Data: []byte("x"), Version: -1})
	}
	for _, p := range []string{"/cu", "/cu/kid-added", "/cu/data-set", "/cu/p", "/cu/r", "/cu/r/x",
		"/cu/changed", "/cu/recreated", "/cu/gone", "/cu/grown", "/cu/gone-kids", "/cu/early"} {
		write(zkproto.OpCreate, create(p))
	}

	// The client sets its watches, as a real one would have them.
	a := dialRaw(t, addr)
	session := a.session()
	var lists zkproto.SetWatches
	for _, c := range rewatchCases {
		var h zkproto.ReplyHeader
		switch c.kind {
		case kindData:
			h, _ = a.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: c.path, Watch: true})
			lists.DataWatches = append(lists.DataWatches, c.path)
		case kindChild:
			h, _ = a.call(zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: c.path, Watch: true})
			lists.ChildWatches = append(lists.ChildWatches, c.path)
		case kindExist:
			// /cu/early exists already: setWatches names it as an exist
			// watch all the same, as a client whose NodeCreated was lost
			// with its connection does.
			h, _ = a.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: c.path, Watch: true})
			if h.Err == zkproto.ErrNoNode {
				h.Err = zkproto.ErrOK
			}
			lists.ExistWatches = append(lists.ExistWatches, c.path)
		case kindPersistent, kindRecursive:
			mode := int32(0)
			if c.kind == kindRecursive {
				mode = 1
			}
			h, _ = a.call(zkproto.OpAddWatch, &zkproto.PathTypeRequest{Path: c.path, Type: mode})
			if c.kind == kindRecursive {
				lists.PersistentRecursiveWatches = append(lists.PersistentRecursiveWatches, c.path)
			} else {
				lists.PersistentWatches = append(lists.PersistentWatches, c.path)
			}
		}
		mustOK(t, "set the watch on "+c.path, h)
	}
	h, _ := a.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/cu"})
	mustOK(t, "exists /cu", h)
	relative := h.Zxid
	a.nc.Close() // the connection drops; the session lives on

	// While the client is away.
	write(zkproto.OpCreate, create("/cu/kid-added/k"))
	setData("/cu/data-set")
	setData("/cu/p")
	write(zkproto.OpCreate, create("/cu/p/k"))
	write(zkproto.OpCreate, create("/cu/r/y"))
	setData("/cu/r/x")
	setData("/cu/changed")
	write(zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/cu/recreated", Version: -1})
	write(zkproto.OpCreate, create("/cu/recreated"))
	write(zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/cu/gone", Version: -1})
	write(zkproto.OpCreate, create("/cu/grown/k"))
	write(zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/cu/gone-kids", Version: -1})

	b := dialRaw(t, addr)
	resp, err := b.connect(zkproto.ConnectRequest{TimeOut: 10000, SessionID: session.SessionID, Passwd: session.Passwd,
		LastZxidSeen: relative, HasReadOnly: true})
	if err != nil || resp.TimeOut == 0 {
		t.Fatalf("reconnect = %+v, %v", resp, err)
	}
	lists.Has2, lists.RelativeZxid = true, relative
	b.sendXid(zkproto.XidSetWatches, zkproto.OpSetWatches2, &lists)
	// Every notification of the setWatches comes before the reply of the
	// next request (ZooKeeper and latch send them before the setWatches
	// reply).
	catchUp = notificationsUntil(b, b.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/cu"}))

	// The watches set again and not fired are still there; the fired
	// one-shot ones are not.
	setData("/cu/kid-added")
	write(zkproto.OpCreate, create("/cu/data-set/k"))
	setData("/cu/p")
	write(zkproto.OpCreate, create("/cu/r/z"))
	setData("/cu/changed")
	setData("/cu/recreated")
	write(zkproto.OpCreate, create("/cu/grown/k2"))
	write(zkproto.OpCreate, create("/cu/later"))
	// A ZooKeeper server notifies a change before it answers a later read
	// of the same client; latch too (docs/zookeeper.md, Watches: order).
	later = notificationsUntil(b, b.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/cu"}))
	return catchUp, later
}

// firstSession opens a session on addr, trying again while the server
// ends the connection unanswered: a ZooKeeper just started answers ruok a
// moment before it takes sessions.
func firstSession(t *testing.T, addr string) *rawClient {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := dialRaw(t, addr)
		resp, err := r.connect(sessionRequest())
		if err == nil && resp.SessionID != 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session on %s within 10s: %+v, %v", addr, resp, err)
		}
		r.nc.Close()
		time.Sleep(100 * time.Millisecond)
	}
}

// ofCase returns the events of events on c's path (at or below it for a
// recursive watch), sorted.
func ofCase(c rewatchCase, events []string) []string {
	var out []string
	for _, ev := range events {
		_, path, _ := strings.Cut(ev, " ")
		if path == c.path || (c.kind == kindRecursive && strings.HasPrefix(path, c.path+"/")) {
			out = append(out, ev)
		}
	}
	slices.Sort(out)
	return out
}

// checkRewatch compares each case's notifications with ZooKeeper's.
func checkRewatch(t *testing.T, server string, catchUp, later []string) {
	t.Helper()
	for _, c := range rewatchCases {
		t.Run(c.name, func(t *testing.T) {
			if got := ofCase(c, catchUp); !slices.Equal(got, c.catchUp) {
				t.Errorf("%s: setWatches2 after a reconnect notified %q of %s, ZooKeeper %q", server, got, c.path, c.catchUp)
			}
			if got := ofCase(c, later); !slices.Equal(got, c.later) {
				t.Errorf("%s: after later writes, %q of %s, ZooKeeper %q", server, got, c.path, c.later)
			}
		})
	}
}

// TestSetWatchesCatchUpByNodeState: after a reconnect, setWatches decides
// what each watch missed from the node's state against relativeZxid, as
// ZooKeeper does, never from the kind of the node's latest change: a data
// watch on a node that only gained a child and a child watch on a node
// whose data only was set report nothing and stay set; persistent and
// recursive watches are set again with no notification.
func TestSetWatchesCatchUpByNodeState(t *testing.T) {
	c := startZK(t, 1, Config{})
	catchUp, later := reconnectWithWatches(t, c.addrs[0])
	checkRewatch(t, "latch", catchUp, later)
}

// TestDifferentialSetWatches runs the reconnect of
// TestSetWatchesCatchUpByNodeState against a real ZooKeeper 3.8 and
// against latch: ZooKeeper gives the expected notifications (they are its
// own), and latch the same.
func TestDifferentialSetWatches(t *testing.T) {
	zkAddr := startZooKeeper(t)
	c := startZK(t, 1, Config{})
	wantCatchUp, wantLater := reconnectWithWatches(t, zkAddr)
	checkRewatch(t, "ZooKeeper", wantCatchUp, wantLater)
	gotCatchUp, gotLater := reconnectWithWatches(t, c.addrs[0])
	slices.Sort(wantCatchUp)
	slices.Sort(gotCatchUp)
	slices.Sort(wantLater)
	slices.Sort(gotLater)
	if !slices.Equal(gotCatchUp, wantCatchUp) {
		t.Errorf("setWatches2 after a reconnect:\n  ZooKeeper: %q\n  latch:     %q", wantCatchUp, gotCatchUp)
	}
	if !slices.Equal(gotLater, wantLater) {
		t.Errorf("after later writes:\n  ZooKeeper: %q\n  latch:     %q", wantLater, gotLater)
	}
}
