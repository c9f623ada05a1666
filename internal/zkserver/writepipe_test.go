package zkserver

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// holdFirstWrite sets l's write hook so that the write with xid first is
// proposed only once the write with xid first+1 has started too (or after
// a deadline), and returns a function reporting whether it had: it had only
// if the two were in flight together.
func holdFirstWrite(t *testing.T, l *Listener, first int32) (overlapped func() bool) {
	t.Helper()
	var once sync.Once
	second := make(chan struct{})
	var mu sync.Mutex
	saw := false
	hook := func(xid int32, _ *server.WriteTurn) {
		switch xid {
		case first + 1:
			once.Do(func() { close(second) })
		case first:
			select {
			case <-second:
				mu.Lock()
				saw = true
				mu.Unlock()
			case <-time.After(3 * time.Second): // the next write never started: not pipelined
			}
		}
	}
	l.beforeWrite.Store(&hook)
	t.Cleanup(func() { l.beforeWrite.Store(nil) })
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return saw
	}
}

// TestPipelinedWritesKeepOrder: many writes sent on one connection without
// waiting for replies are in flight together (the first is held until the
// second has started), yet every reply comes in order and the writes take
// effect in the order sent: sequential creates get increasing suffixes in
// the order of their data, and a counter set in between ends at the last
// value with one version per set. On each member of three, so that a
// follower forwards its pipelined proposals.
func TestPipelinedWritesKeepOrder(t *testing.T) {
	c := startZK(t, 3, Config{})
	for m, addr := range c.addrs {
		r := dialRaw(t, addr)
		r.session()
		dir := fmt.Sprintf("/p%d", m)
		for _, path := range []string{dir, dir + "/counter"} {
			if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: path, ACL: worldAnyone}); h.Err != zkproto.ErrOK {
				t.Fatalf("create %s: %d", path, h.Err)
			}
		}
		overlapped := holdFirstWrite(t, c.listeners[m], r.xid+1)
		const n = 150
		sent := make([]int32, 0, 2*n)
		for i := range n {
			sent = append(sent, r.send(zkproto.OpCreate, &zkproto.CreateRequest{
				Path: dir + "/s-", Data: []byte(strconv.Itoa(i)), ACL: worldAnyone, Flags: zkproto.ModePersistentSequential}))
			if i%3 == 0 {
				sent = append(sent, r.send(zkproto.OpSetData, &zkproto.SetDataRequest{Path: dir + "/counter", Data: []byte(strconv.Itoa(i)), Version: -1}))
			}
		}
		last := -1
		for _, xid := range sent {
			h, rest := r.reply()
			if h.Xid != xid || h.Err != zkproto.ErrOK {
				t.Fatalf("member %d: reply xid %d err %d, want xid %d OK", m, h.Xid, h.Err, xid)
			}
			var created zkproto.CreateResponse
			if zkproto.Decode(rest, &created, "create") != nil || !strings.HasPrefix(created.Path, dir+"/s-") {
				continue // a setData's reply
			}
			suffix, err := strconv.Atoi(strings.TrimPrefix(created.Path, dir+"/s-"))
			if err != nil || suffix <= last {
				t.Fatalf("member %d: create answered %q after suffix %d", m, created.Path, last)
			}
			last = suffix
		}
		if !overlapped() {
			t.Errorf("member %d: the second write did not start before the first was proposed: writes are not pipelined", m)
		}
		// The applied order is the sent order: data by suffix is 0..n-1.
		h, rest := r.call(zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: dir})
		var children zkproto.GetChildrenResponse
		if h.Err != zkproto.ErrOK || zkproto.Decode(rest, &children, "children") != nil {
			t.Fatalf("member %d: getChildren: %d", m, h.Err)
		}
		sort.Strings(children.Children)
		want := 0
		for _, name := range children.Children {
			if !strings.HasPrefix(name, "s-") {
				continue
			}
			h, rest := r.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: dir + "/" + name})
			var data zkproto.GetDataResponse
			if h.Err != zkproto.ErrOK || zkproto.Decode(rest, &data, "data") != nil || string(data.Data) != strconv.Itoa(want) {
				t.Fatalf("member %d: %s holds %q, want %d (applied out of the sent order)", m, name, data.Data, want)
			}
			want++
		}
		if want != n {
			t.Fatalf("member %d: %d sequential nodes, want %d", m, want, n)
		}
		h, rest = r.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: dir + "/counter"})
		var counter zkproto.GetDataResponse
		if h.Err != zkproto.ErrOK || zkproto.Decode(rest, &counter, "data") != nil {
			t.Fatalf("member %d: counter: %d", m, h.Err)
		}
		if sets := (n + 2) / 3; string(counter.Data) != strconv.Itoa(3*(sets-1)) || counter.Stat.Version != int32(sets) {
			t.Fatalf("member %d: counter %q at version %d, want %d at %d", m, counter.Data, counter.Stat.Version, 3*(sets-1), sets)
		}
	}
}

// TestLostWriteEndsTheConnection: a write lost on its way to the log (the
// test hook takes its place in the stream and never proposes it, as a
// leader change may drop a proposal) while the writes after it are in
// flight: none of those is applied (the state machine refuses a write
// whose predecessor is missing), none is answered, and the connection
// ends. A new connection of the session then writes again.
func TestLostWriteEndsTheConnection(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	resp := r.session()
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/q", ACL: worldAnyone}); h.Err != zkproto.ErrOK {
		t.Fatalf("create /q: %d", h.Err)
	}
	const n, lost = 40, 10
	base := r.xid
	started := make(chan struct{})
	var once sync.Once
	hook := func(xid int32, turn *server.WriteTurn) {
		switch xid - base {
		case lost + 2:
			once.Do(func() { close(started) })
		case lost + 1: // xids count from 1: the write of node lost
			select {
			case <-started: // a later write is in flight, waiting for this turn
			case <-time.After(5 * time.Second):
				t.Error("no later write started while the lost one was held")
			}
			turn.LoseForTest()
		}
	}
	c.listeners[0].beforeWrite.Store(&hook)
	creates := make([]zkproto.Record, n)
	for i := range creates {
		creates[i] = &zkproto.CreateRequest{Path: fmt.Sprintf("/q/n%02d", i), ACL: worldAnyone}
	}
	r.sendAll(zkproto.OpCreate, creates) // the connection ends while they are read
	for i := range lost {
		h, _ := r.reply()
		if h.Xid != base+int32(i)+1 || h.Err != zkproto.ErrOK {
			t.Fatalf("write %d answered xid %d err %d", i, h.Xid, h.Err)
		}
	}
	if !r.closed() {
		t.Fatal("the connection was not ended after the lost write")
	}
	c.listeners[0].beforeWrite.Store(nil)

	again := dialRaw(t, c.addrs[0])
	if got, err := again.connect(zkproto.ConnectRequest{TimeOut: 10000, SessionID: resp.SessionID, Passwd: resp.Passwd}); err != nil || got.SessionID != resp.SessionID {
		t.Fatalf("resume = %+v, %v", got, err)
	}
	h, rest := again.call(zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/q"})
	var children zkproto.GetChildrenResponse
	if h.Err != zkproto.ErrOK || zkproto.Decode(rest, &children, "children") != nil {
		t.Fatalf("getChildren: %d", h.Err)
	}
	sort.Strings(children.Children)
	var want []string
	for i := range lost {
		want = append(want, fmt.Sprintf("n%02d", i))
	}
	if fmt.Sprint(children.Children) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want exactly the writes before the lost one %v", children.Children, want)
	}
	if h, _ := again.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/q/after", ACL: worldAnyone}); h.Err != zkproto.ErrOK {
		t.Fatalf("a write on the session's new connection: %d", h.Err)
	}
}

// TestReplyNotHeldBehindPendingWrite: the sender leaves a reply buffered
// only while the next one is ready too, so a write's reply reaches the
// client while the write pipelined after it is still held back.
func TestReplyNotHeldBehindPendingWrite(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	held := r.xid + 2
	release := make(chan struct{})
	hook := func(xid int32, _ *server.WriteTurn) {
		if xid == held {
			<-release
		}
	}
	c.listeners[0].beforeWrite.Store(&hook)
	t.Cleanup(func() { c.listeners[0].beforeWrite.Store(nil) })
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	first := r.send(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/first", ACL: worldAnyone})
	second := r.send(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/second", ACL: worldAnyone})
	if second != held {
		t.Fatalf("second write has xid %d, want %d", second, held)
	}
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if h, _ := r.reply(); h.Xid != first || h.Err != zkproto.ErrOK {
		t.Fatalf("reply xid %d err %d, want xid %d OK while the next write is held", h.Xid, h.Err, first)
	}
	close(release)
	released = true
	if h, _ := r.reply(); h.Xid != second || h.Err != zkproto.ErrOK {
		t.Fatalf("reply xid %d err %d, want xid %d OK", h.Xid, h.Err, second)
	}
}

// TestRunnersEndAtClose: the goroutines kept to run requests end when the
// listener closes.
func TestRunnersEndAtClose(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	const n = 20
	for i := range n {
		r.send(zkproto.OpCreate, &zkproto.CreateRequest{Path: fmt.Sprintf("/r%d", i), ACL: worldAnyone})
	}
	for range n {
		if h, _ := r.reply(); h.Err != zkproto.ErrOK {
			t.Fatalf("create: %d", h.Err)
		}
	}
	l := c.listeners[0]
	if !testcluster.WaitFor(10*time.Second, func() bool { return l.runners.idle.Load() > 0 }) {
		t.Fatal("no runner waits for work after the requests")
	}
	l.Close()
	if !testcluster.WaitFor(10*time.Second, func() bool { return l.runners.idle.Load() == 0 }) {
		t.Fatalf("%d runners still wait 10 s after Close", l.runners.idle.Load())
	}
}
