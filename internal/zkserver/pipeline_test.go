package zkserver

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/zkproto"
)

// TestPipelinedRequestsKeepTheirOrder: one connection to a follower sends,
// without waiting for any reply, rounds of create, getData, a child's
// create, setData, getData, sequential creates, deletes of unrelated and
// related paths: every reply comes in xid order with zxids never
// decreasing, every read sees the writes sent before it on the
// connection (never NoNode, never the old value), the child's create
// finds its parent, and the sequential suffixes follow the request order.
func TestPipelinedRequestsKeepTheirOrder(t *testing.T) {
	c := startZK(t, 3, Config{})
	r := dialRaw(t, c.addrs[2])
	r.session()
	type expect struct {
		xid   int32
		check func(h zkproto.ReplyHeader, rest []byte) error
	}
	var want []expect
	ok := func(xid int32) {
		want = append(want, expect{xid, func(h zkproto.ReplyHeader, _ []byte) error {
			if h.Err != zkproto.ErrOK {
				return fmt.Errorf("code %d", h.Err)
			}
			return nil
		}})
	}
	data := func(xid int32, value string) {
		want = append(want, expect{xid, func(h zkproto.ReplyHeader, rest []byte) error {
			if h.Err != zkproto.ErrOK {
				return fmt.Errorf("getData code %d, want the value %q", h.Err, value)
			}
			var resp zkproto.GetDataResponse
			if err := zkproto.Decode(rest, &resp, "GetDataResponse"); err != nil {
				return err
			}
			if string(resp.Data) != value {
				return fmt.Errorf("getData = %q, want %q", resp.Data, value)
			}
			return nil
		}})
	}
	lastSequential := ""
	created := func(xid int32, path string) {
		want = append(want, expect{xid, func(h zkproto.ReplyHeader, rest []byte) error {
			var resp zkproto.CreateResponse
			if h.Err != zkproto.ErrOK {
				return fmt.Errorf("create code %d, want %s", h.Err, path)
			}
			if err := zkproto.Decode(rest, &resp, "CreateResponse"); err != nil {
				return err
			}
			if !strings.HasSuffix(path, "-") {
				if resp.Path != path {
					return fmt.Errorf("created %s, want %s", resp.Path, path)
				}
				return nil
			}
			// Sequence numbers do not start at 0 in latch: they increase.
			if !strings.HasPrefix(resp.Path, path) || len(resp.Path) != len(path)+10 || resp.Path <= lastSequential {
				return fmt.Errorf("created %s after %s, want a higher %s%%010d", resp.Path, lastSequential, path)
			}
			lastSequential = resp.Path
			return nil
		}})
	}
	create := func(path, value string, mode zkproto.CreateMode) int32 {
		return r.send(zkproto.OpCreate, &zkproto.CreateRequest{Path: path, Data: []byte(value), ACL: worldAnyone, Flags: mode})
	}
	created(create("/q", "", zkproto.ModePersistent), "/q")
	const rounds = 40
	for i := range rounds {
		n := fmt.Sprintf("/n%d", i)
		created(create(n, "v0", zkproto.ModePersistent), n)
		data(r.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: n}), "v0")
		created(create(n+"/c", "c", zkproto.ModePersistent), n+"/c")
		ok(r.send(zkproto.OpSetData, &zkproto.SetDataRequest{Path: n, Data: []byte("v1"), Version: -1}))
		data(r.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: n}), "v1")
		for range 2 {
			created(create("/q/s-", "", zkproto.ModePersistentSequential), "/q/s-")
		}
		ok(r.send(zkproto.OpDelete, &zkproto.DeleteRequest{Path: n + "/c", Version: -1}))
		ok(r.send(zkproto.OpDelete, &zkproto.DeleteRequest{Path: n, Version: -1}))
		ok(r.send(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/q"}))
	}
	var last int64
	for i, w := range want {
		h, rest := r.reply()
		if h.Xid != w.xid {
			t.Fatalf("reply %d has xid %d, want %d: out of order", i, h.Xid, w.xid)
		}
		if h.Zxid < last {
			t.Fatalf("reply %d has zxid %d after %d", i, h.Zxid, last)
		}
		last = h.Zxid
		if err := w.check(h, rest); err != nil {
			t.Fatalf("reply %d (xid %d): %v", i, h.Xid, err)
		}
	}
}

// TestPipelineDependencies: which earlier request a request waits for.
func TestPipelineDependencies(t *testing.T) {
	p := func(op zkproto.OpCode, body zkproto.Record) *pending {
		q := &pending{h: zkproto.RequestHeader{Type: op}, body: body}
		q.class = classOf(op, body)
		return q
	}
	setA := p(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/a"})
	setB := p(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/b"})
	createAB := p(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/a/b"})
	seqA := p(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/a/s-", Flags: zkproto.ModeEphemeralSequential})
	createAC := p(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/a/c"})
	createAbc := p(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/ab/c"})
	getB := p(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/b"})
	getA := p(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/a"})
	watchA := p(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/a", Watch: true})
	watchA2 := p(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/a", Watch: true})
	ping := p(zkproto.OpPing, nil)
	sync := p(zkproto.OpSync, &zkproto.PathRequest{Path: "/"})
	auth := p(zkproto.OpAuth, &zkproto.AuthPacket{})
	cases := []struct {
		name         string
		later, early *pending
		wait         bool
	}{
		{"write after an unrelated write (FIFO client order)", setB, setA, true},
		{"create under a path written before", createAB, setA, true},
		{"a sibling's create", createAC, createAB, true},
		{"a sequential create after a sibling's create", seqA, createAB, true},
		{"a sibling's create after a sequential create", createAC, seqA, true},
		{"a prefix that is not a parent", createAbc, setA, true},
		{"read after an unrelated write", getB, setA, true},
		{"read after a read", getB, getA, false},
		{"watch after a watch of the same path (each its own, see watchGen)", watchA, watchA2, false},
		{"watch after a read of the same path", watchA, getA, false},
		{"write after a read of its path", setA, getA, true},
		{"write after a read of another path", setB, getA, true},
		{"ping after a write", ping, setA, false},
		{"sync after a read", sync, getA, true},
		{"read after auth", getA, auth, true},
		{"ping after auth", ping, auth, true},
	}
	for _, tc := range cases {
		if got := tc.later.mustWait(tc.early, false); got != tc.wait {
			t.Errorf("%s: waits = %v, want %v", tc.name, got, tc.wait)
		}
		// With pipelined writes (one shard), a write does not wait for the
		// earlier writes: their turns order them; nothing else changes.
		want := tc.wait && (tc.later.class != classWrite || tc.early.class != classWrite)
		if got := tc.later.mustWait(tc.early, true); got != want {
			t.Errorf("%s, writes pipelined: waits = %v, want %v", tc.name, got, want)
		}
	}
}

// TestPipelinedReadsNeverGoBack: reads pipelined on one connection run
// concurrently, yet none answers from an older state than a read before
// it, as ZooKeeper's in-order processing guarantees: while another client
// writes a node again and again, the mzxids of the node in the replies of
// many pipelined getData never decrease.
func TestPipelinedReadsNeverGoBack(t *testing.T) {
	c := startZK(t, 1, Config{})
	writer, _ := connect(t, c.addrs[:1], 5*time.Second)
	for _, path := range []string{"/x", "/y"} {
		if _, err := writer.Create(path, []byte("0"), 0, openACL); err != nil {
			t.Fatal(err)
		}
	}
	// Writers on connections of their own, so that the member applies
	// writes while the reads run.
	const writers = 8
	stop := make(chan struct{})
	writes := make(chan error, writers)
	for w := range writers {
		conn := writer
		if w > 0 {
			conn, _ = connect(t, c.addrs[:1], 5*time.Second)
		}
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					writes <- nil
					return
				default:
				}
				if _, err := conn.Set("/x", []byte(fmt.Sprint(i)), -1); err != nil {
					writes <- err
					return
				}
			}
		}()
	}
	defer func() {
		close(stop)
		for range writers {
			if err := <-writes; err != nil {
				t.Errorf("writer: %v", err)
			}
		}
	}()
	// Every other read waits a little before it reads: the read after it
	// then reads first, from an older state, unless reads are put in
	// order.
	var reads atomic.Uint64
	delay := func() {
		if reads.Add(1)%2 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	c.listeners[0].beforeRead.Store(&delay)
	r := dialRaw(t, c.addrs[0])
	r.session()
	var last int64
	for batch := range 40 {
		// A write first: the reads after it wait for it, then run at once
		// (a read alone in flight runs on the reader's goroutine, in turn).
		xids := []int32{r.send(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/y", Data: []byte("y"), Version: -1})}
		for range 100 {
			xids = append(xids, r.send(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/x", Watch: batch%2 == 0}))
		}
		for i := 0; i < len(xids); {
			h, rest := r.reply()
			if h.Xid == zkproto.XidNotification {
				continue
			}
			if h.Xid != xids[i] || h.Err != zkproto.ErrOK {
				t.Fatalf("batch %d reply %d: xid %d err %d, want xid %d ok", batch, i, h.Xid, h.Err, xids[i])
			}
			if i++; i == 1 {
				continue // the write
			}
			var resp zkproto.GetDataResponse
			if err := zkproto.Decode(rest, &resp, "GetDataResponse"); err != nil {
				t.Fatal(err)
			}
			if resp.Stat.Mzxid < last {
				t.Fatalf("batch %d reply %d read /x at mzxid %d after a reply before it read mzxid %d", batch, i, resp.Stat.Mzxid, last)
			}
			last = resp.Stat.Mzxid
		}
	}
}
