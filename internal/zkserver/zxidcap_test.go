package zkserver

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/zkproto"
)

// TestNoZxidAheadOfANotification: a change that lands between a read
// that sets a watch and that read's reply is notified after the reply (the
// client registers the watch on it). A client whose connection drops
// between the two reconnects with the reply's zxid as lastZxidSeen and
// relativeZxid, and setWatches must still report the change: the reply
// may not carry a zxid at or past the change before the change's
// notification has gone. Client a reads /x with a watch; the test hook
// pauses a's reply while another client sets /x, before a's connection
// waits for its notifications (the change then reaches the watch, held
// behind the reply) or after (the change may still be on its way to the
// connection); a takes the reply's zxid and goes away without reading on;
// the same session reconnects with that zxid and sets its data watch
// again, which must fire NodeDataChanged. The reply must still carry at
// least the zxid of the state it read (the node's mzxid here).
func TestNoZxidAheadOfANotification(t *testing.T) {
	for _, awaited := range []bool{false, true} {
		name := "change before the reply waits for notifications"
		if awaited {
			name = "change after the reply waited for notifications"
		}
		t.Run(name, func(t *testing.T) {
			c := startZK(t, 1, Config{})
			writer := firstSession(t, c.addrs[0])
			mustOK(t, "create /x", firstHeader(writer.call(zkproto.OpCreate, create("/x"))))

			a := dialRaw(t, c.addrs[0])
			session := a.session()

			// The hook pauses a's getData reply until the test has set /x.
			var armed atomic.Bool
			reached, proceed := make(chan struct{}), make(chan struct{})
			hook := func(op zkproto.OpCode, at bool) {
				if op != zkproto.OpGetData || at != awaited || !armed.CompareAndSwap(true, false) {
					return
				}
				close(reached)
				select {
				case <-proceed:
				case <-time.After(20 * time.Second):
				}
			}
			c.listeners[0].replyHook.Store(&hook)
			t.Cleanup(func() { c.listeners[0].replyHook.Store(nil) })
			armed.Store(true)

			xid := a.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/x", Watch: true})
			select {
			case <-reached:
			case <-time.After(20 * time.Second):
				t.Fatal("a's getData reply never reached the hook")
			}
			h, rest := writer.call(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/x", Data: []byte("new"), Version: -1})
			var set zkproto.StatResponse
			mustDecode(t, "set /x", h, rest, &set, "StatResponse")
			changed := set.Stat.Mzxid
			close(proceed)

			h, rest = a.reply()
			if h.Xid != xid {
				t.Fatalf("a's first frame has xid %d, want the reply %d", h.Xid, xid)
			}
			var got zkproto.GetDataResponse
			mustDecode(t, "getData /x", h, rest, &got, "GetDataResponse")
			if len(got.Data) != 0 {
				t.Fatalf("a's read saw %q: it ran after the change, not before", got.Data)
			}
			seen := h.Zxid
			t.Logf("read /x at mzxid %d; reply zxid %d; the change's mzxid %d", got.Stat.Mzxid, seen, changed)
			if seen < got.Stat.Mzxid {
				t.Fatalf("the reply's zxid %d is below the mzxid %d of the state it read", seen, got.Stat.Mzxid)
			}
			a.nc.Close() // the notification, if sent, is never read

			b := dialRaw(t, c.addrs[0])
			resp, err := b.connect(zkproto.ConnectRequest{TimeOut: 10000, SessionID: session.SessionID, Passwd: session.Passwd,
				LastZxidSeen: seen, HasReadOnly: true})
			if err != nil || resp.TimeOut == 0 {
				t.Fatalf("reconnect = %+v, %v", resp, err)
			}
			b.sendXid(zkproto.XidSetWatches, zkproto.OpSetWatches, &zkproto.SetWatches{RelativeZxid: seen, DataWatches: []string{"/x"}})
			// Every notification of the setWatches comes before the reply
			// of the next request. No reply before the notification of the
			// change (the setWatches reply, whose zxid the Java client
			// keeps) may carry its zxid or a later one either.
			next := b.send(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/"})
			var events []string
			for {
				h, rest := b.reply()
				if h.Xid == zkproto.XidNotification {
					events = append(events, eventName(decodeEvent(t, rest)))
					continue
				}
				mustOK(t, fmt.Sprintf("reply of xid %d", h.Xid), h)
				if !slices.Contains(events, "NodeDataChanged /x") && h.Zxid >= changed {
					t.Errorf("the reply of xid %d carries zxid %d, at or past the change at %d, before its notification", h.Xid, h.Zxid, changed)
				}
				if h.Xid == next {
					break
				}
			}
			if !slices.Contains(events, "NodeDataChanged /x") {
				t.Fatalf("after a reconnect with the reply's zxid %d, setWatches notified %q, want NodeDataChanged /x "+
					"(the change at %d came after the read, and its notification was never read)", seen, events, changed)
			}
		})
	}
}

// TestOwedNotificationsBoundTheZxid: the watch table counts as owed every
// event a watch may still notify the client of (waiting in a watch not
// yet armed, or held behind its request's reply), and owedFrom, the bound
// of the zxids a frame may carry, is the least of them until the
// notification is sent or the event found not to fire.
func TestOwedNotificationsBoundTheZxid(t *testing.T) {
	r := newTableRecorder()
	owed := func(want uint64, when string) {
		t.Helper()
		if got := r.owedFrom.Load(); got != want {
			t.Fatalf("%s: owedFrom = %d, want %d", when, got, want)
		}
	}
	const none = math.MaxUint64
	owed(none, "at first")

	a := r.entry(1, "/a", kindData, 10)
	g := r.set(a, kindData)
	r.event(1, "/a", api.EventChanged, 12) // before arm: may fire
	owed(12, "an event waits in a watch not yet armed")
	r.event(1, "/a", api.EventChanged, 11)
	owed(11, "a lower one")
	r.arm(g, pos(11)) // the read saw 11: only 12 fires, held
	owed(12, "armed: 11 did not fire, 12 is held behind the reply")
	r.release([]*watchGen{g}, nil, nil)
	owed(none, "released: the notification is sent")
	if want := []string{changed("/a")}; !slices.Equal(r.sent, want) {
		t.Fatalf("notified %v, want %v", r.sent, want)
	}

	b := r.entry(2, "/b", kindData, 20)
	dropped := r.set(b, kindData)
	r.event(2, "/b", api.EventChanged, 21)
	owed(21, "an event waits in a watch not yet armed")
	r.drop(dropped)
	owed(none, "the watch is dropped (its read failed)")

	c := r.entry(3, "/c", kindData, 30)
	first, second := r.set(c, kindData), r.set(c, kindData)
	r.event(3, "/c", api.EventDeleted, 31)
	r.arm(first, pos(30))
	r.arm(second, pos(30))
	owed(31, "two watches hold the change")
	r.release([]*watchGen{first}, nil, nil)
	owed(31, "one released, the other still holds it")
	r.release([]*watchGen{second}, nil, nil)
	owed(none, "both released")

	d := r.entry(4, "/d", kindData, 40)
	unheld := r.set(d, kindData)
	r.release([]*watchGen{unheld}, nil, nil)
	r.arm(unheld, pos(40))
	r.event(4, "/d", api.EventChanged, 41)
	owed(none, "a watch whose reply is sent notifies at once")
}

// TestFrameZxid: a frame's zxid is the index through which the
// connection's events were dispatched, kept below the notifications it
// owes, never below the reply's floor nor below the last zxid sent.
func TestFrameZxid(t *testing.T) {
	r := newTableRecorder()
	c := &conn{watches: r.watchTable}
	zxid := func(floor uint64, want int64, when string) {
		t.Helper()
		if got := c.zxidLocked(floor); got != want {
			t.Fatalf("%s: zxid %d, want %d", when, got, want)
		}
		if c.seen.Load() < uint64(want) {
			t.Fatalf("%s: seen %d, below the zxid sent", when, c.seen.Load())
		}
	}
	c.through.Store(10)
	zxid(5, 10, "dispatched through 10, floor 5")
	r.mu.Lock()
	r.oweLocked(0, 14)
	r.oweLocked(3, 12) // another shard's index: not a zxid
	r.mu.Unlock()
	c.through.Store(20)
	zxid(0, 13, "dispatched through 20, 14 owed")
	zxid(11, 13, "a floor below the last zxid sent")
	r.mu.Lock()
	r.paidLocked(0, 14)
	r.mu.Unlock()
	zxid(0, 13, "14 paid, the batch not settled: still below it")
	r.mu.Lock()
	r.settleOwedLocked()
	r.mu.Unlock()
	zxid(0, 20, "14 sent")
	c.through.Store(25)
	zxid(30, 30, "a floor past the cap (another shard's index)")
	zxid(0, 30, "never down")
}
