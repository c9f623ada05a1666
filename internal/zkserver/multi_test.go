package zkserver

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/zkproto"
)

// multiRequest is a multi or multiRead body: each operation after its
// header, then the done header.
type multiRequest []zkOp

func (m multiRequest) Encode(w *zkproto.Writer) {
	for _, op := range m {
		h := zkproto.MultiHeader{Type: op.op, Err: -1}
		h.Encode(w)
		op.body.Encode(w)
	}
	done := zkproto.MultiHeader{Type: -1, Done: true, Err: -1}
	done.Encode(w)
}

func (m multiRequest) Decode(*zkproto.Reader) {}

// multiReply decodes a multi reply body into its headers, and the bodies
// of the create results (paths) and the data reads (data).
type multiReply struct {
	headers []zkproto.MultiHeader
	paths   []string
	data    [][]byte
	stats   []zkproto.Stat
}

func decodeMultiReply(t *testing.T, buf []byte) multiReply {
	t.Helper()
	r := zkproto.NewReader(buf)
	var out multiReply
	for {
		var h zkproto.MultiHeader
		h.Decode(r)
		if r.Err() != nil {
			t.Fatalf("multi reply header: %v", r.Err())
		}
		if h.Done {
			break
		}
		out.headers = append(out.headers, h)
		var body zkproto.Record
		switch h.Type {
		case zkproto.OpError:
			var e zkproto.ErrorResponse
			e.Decode(r)
			if e.Err != h.Err {
				t.Fatalf("error result body %d, header %d", e.Err, h.Err)
			}
		case zkproto.OpCreate:
			var c zkproto.CreateResponse
			c.Decode(r)
			out.paths = append(out.paths, c.Path)
		case zkproto.OpCreate2:
			var c zkproto.Create2Response
			c.Decode(r)
			out.paths = append(out.paths, c.Path)
			out.stats = append(out.stats, c.Stat)
		case zkproto.OpSetData:
			body = &zkproto.StatResponse{}
		case zkproto.OpGetData:
			var g zkproto.GetDataResponse
			g.Decode(r)
			out.data = append(out.data, g.Data)
			out.stats = append(out.stats, g.Stat)
		case zkproto.OpGetChildren:
			body = &zkproto.GetChildrenResponse{}
		}
		if body != nil {
			body.Decode(r)
		}
	}
	r.End("multi reply")
	if r.Err() != nil {
		t.Fatalf("multi reply: %v", r.Err())
	}
	return out
}

// codes returns the err of each result header.
func (m multiReply) codes() []zkproto.ErrCode {
	out := make([]zkproto.ErrCode, len(m.headers))
	for i, h := range m.headers {
		out[i] = h.Err
	}
	return out
}

func mcreate(path string, flags zkproto.CreateMode) zkOp {
	return zkOp{zkproto.OpCreate, &zkproto.CreateRequest{Path: path, ACL: worldAnyone, Flags: flags}}
}

func check(path string, version int32) zkOp {
	return zkOp{zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: path, Version: version}}
}

func del(path string, version int32) zkOp {
	return zkOp{zkproto.OpDelete, &zkproto.DeleteRequest{Path: path, Version: version}}
}

func set(path string, value string, version int32) zkOp {
	return zkOp{zkproto.OpSetData, &zkproto.SetDataRequest{Path: path, Data: []byte(value), Version: version}}
}

// callMulti sends a multi and returns its reply; the header err must be 0
// (ZooKeeper 3.8 sends 0 for a refused multi too: the codes are per op).
func (r *rawClient) callMulti(ops ...zkOp) multiReply {
	r.t.Helper()
	h, rest := r.call(zkproto.OpMulti, multiRequest(ops))
	if h.Err != zkproto.ErrOK {
		r.t.Fatalf("multi header err %d, want 0", h.Err)
	}
	return decodeMultiReply(r.t, rest)
}

func sameCodes(got []zkproto.ErrCode, want ...zkproto.ErrCode) bool {
	return fmt.Sprint(got) == fmt.Sprint(want)
}

// TestMultiResultShape: a refused multi reports the failing operation's
// code, OK before it and RuntimeInconsistency after it, and applies
// nothing; each refusal reason gets ZooKeeper's code.
func TestMultiResultShape(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	const (
		ok  = zkproto.ErrOK
		rti = zkproto.ErrRuntimeInconsistency
	)
	if got := r.callMulti(mcreate("/m", 0), mcreate("/m/a", 0), set("/m", "v", 0), check("/m", 1)); !sameCodes(got.codes(), ok, ok, ok, ok) ||
		got.paths[0] != "/m" || got.paths[1] != "/m/a" || got.headers[2].Type != zkproto.OpSetData || got.headers[3].Type != zkproto.OpCheck {
		t.Fatalf("successful multi = %+v", got)
	}
	r.callMulti(mcreate("/eph", zkproto.ModeEphemeral))
	cases := []struct {
		name string
		ops  []zkOp
		want []zkproto.ErrCode
	}{
		{"bad version in the middle", []zkOp{mcreate("/m/b", 0), check("/m", 7), mcreate("/m/c", 0)}, []zkproto.ErrCode{ok, zkproto.ErrBadVersion, rti}},
		{"missing parent", []zkOp{mcreate("/m/b", 0), mcreate("/none/x", 0)}, []zkproto.ErrCode{ok, zkproto.ErrNoNode}},
		{"parent deleted earlier in the multi", []zkOp{del("/m/a", -1), del("/m", -1), mcreate("/m/z", 0)}, []zkproto.ErrCode{ok, ok, zkproto.ErrNoNode}},
		{"exists", []zkOp{mcreate("/m", 0), mcreate("/m/q", 0)}, []zkproto.ErrCode{zkproto.ErrNodeExists, rti}},
		{"not empty", []zkOp{del("/m", -1)}, []zkproto.ErrCode{zkproto.ErrNotEmpty}},
		{"delete at a wrong version", []zkOp{del("/m/a", 3)}, []zkproto.ErrCode{zkproto.ErrBadVersion}},
		{"delete a missing node", []zkOp{del("/m/none", -1), mcreate("/m/q", 0)}, []zkproto.ErrCode{zkproto.ErrNoNode, rti}},
		{"set a missing node", []zkOp{set("/m/none", "x", -1)}, []zkproto.ErrCode{zkproto.ErrNoNode}},
		{"set at a wrong version", []zkOp{set("/m", "x", 9)}, []zkproto.ErrCode{zkproto.ErrBadVersion}},
		{"child of an ephemeral node", []zkOp{mcreate("/eph/c", 0)}, []zkproto.ErrCode{zkproto.ErrNoChildrenForEphemerals}},
		{"child of an ephemeral node made in the multi", []zkOp{mcreate("/e2", zkproto.ModeEphemeral), mcreate("/e2/c", 0)}, []zkproto.ErrCode{ok, zkproto.ErrNoChildrenForEphemerals}},
		{"invalid ACL after a valid op", []zkOp{mcreate("/m/v", 0), {zkproto.OpCreate, &zkproto.CreateRequest{Path: "/m/w"}}}, []zkproto.ErrCode{ok, zkproto.ErrInvalidACL}},
		{"state refusal before an invalid op", []zkOp{check("/m", 5), {zkproto.OpCreate, &zkproto.CreateRequest{Path: "/m/w"}}}, []zkproto.ErrCode{zkproto.ErrBadVersion, rti}},
		{"bad path", []zkOp{mcreate("/m/v", 0), mcreate("rel", 0), mcreate("/m/u", 0)}, []zkproto.ErrCode{ok, zkproto.ErrBadArguments, rti}},
	}
	for _, tc := range cases {
		got := r.callMulti(tc.ops...)
		if !sameCodes(got.codes(), tc.want...) {
			t.Errorf("%s: codes %v, want %v", tc.name, got.codes(), tc.want)
		}
		for _, h := range got.headers {
			if h.Type != zkproto.OpError {
				t.Errorf("%s: a refused multi's result has type %d, want -1", tc.name, h.Type)
			}
		}
	}
	// Nothing of the refused multis was applied.
	for _, path := range []string{"/m/b", "/m/c", "/m/z", "/m/q", "/m/v", "/m/u", "/e2", "/none"} {
		if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: path}); h.Err != zkproto.ErrNoNode {
			t.Errorf("%s after the refused multis: exists = %d, want NoNode", path, h.Err)
		}
	}
	if got := r.callMulti(); len(got.headers) != 0 {
		t.Fatalf("empty multi = %+v", got)
	}
	// A malformed multi: a header whose type is not allowed in a multi.
	if h, _ := r.call(zkproto.OpMulti, multiRequest{{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/m"}}}); h.Err != zkproto.ErrMarshallingError {
		t.Fatalf("multi holding a getData answered %d, want MarshallingError", h.Err)
	}
	if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/m"}); h.Err != zkproto.ErrOK {
		t.Fatalf("exists after the malformed multi answered %d", h.Err)
	}
}

// TestMultiRead: reads of several nodes at one index, each failing on its
// own.
func TestMultiRead(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	r.callMulti(mcreate("/r", 0), mcreate("/r/a", 0), mcreate("/r/b", 0), set("/r/a", "va", -1))
	h, rest := r.call(zkproto.OpMultiRead, multiRequest{
		{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/r/a"}},
		{zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/r"}},
		{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/r/none"}},
	})
	if h.Err != zkproto.ErrOK {
		t.Fatalf("multiRead header err %d", h.Err)
	}
	got := decodeMultiReply(t, rest)
	if !sameCodes(got.codes(), zkproto.ErrOK, zkproto.ErrOK, zkproto.ErrNoNode) || string(got.data[0]) != "va" || got.stats[0].Version != 1 {
		t.Fatalf("multiRead = %+v", got)
	}
	if got.headers[0].Type != zkproto.OpGetData || got.headers[1].Type != zkproto.OpGetChildren || got.headers[2].Type != zkproto.OpError {
		t.Fatalf("multiRead result types = %+v", got.headers)
	}
	h, rest = r.call(zkproto.OpMultiRead, multiRequest{
		{zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "rel"}},
		{zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/r"}},
	})
	if got := decodeMultiReply(t, rest); h.Err != zkproto.ErrOK || !sameCodes(got.codes(), zkproto.ErrBadArguments, zkproto.ErrOK) {
		t.Fatalf("multiRead with a bad path = %d %v, want [BadArguments OK]", h.Err, got.codes())
	}
	if h, _ := r.call(zkproto.OpMultiRead, multiRequest{mcreate("/r/x", 0)}); h.Err != zkproto.ErrMarshallingError {
		t.Fatalf("multiRead holding a create answered %d, want MarshallingError", h.Err)
	}
}

// TestMultiGoClient: go-zookeeper's Multi applies all or nothing, with
// sequential and ephemeral creates, and reports the failing op's error.
func TestMultiGoClient(t *testing.T) {
	c := startZK(t, 3, Config{})
	conn, _ := connect(t, c.addrs, 5*time.Second)
	res, err := conn.Multi(
		&zk.CreateRequest{Path: "/g", Acl: openACL},
		&zk.CreateRequest{Path: "/g/s-", Acl: openACL, Flags: zk.FlagSequence},
		&zk.CreateRequest{Path: "/g/e", Acl: openACL, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: "/g", Data: []byte("x"), Version: 0},
		&zk.CheckVersionRequest{Path: "/g", Version: 1},
	)
	if err != nil || len(res) != 5 || res[0].String != "/g" || len(res[1].String) != len("/g/s-")+10 || res[3].Stat == nil || res[3].Stat.Version != 1 {
		t.Fatalf("multi = %+v, %v", res, err)
	}
	_, err = conn.Multi(
		&zk.CreateRequest{Path: "/g/never", Acl: openACL},
		&zk.DeleteRequest{Path: "/g", Version: -1},
	)
	if !errors.Is(err, zk.ErrNotEmpty) {
		t.Fatalf("refused multi = %v, want ErrNotEmpty", err)
	}
	if ok, _, err := conn.Exists("/g/never"); ok || err != nil {
		t.Fatalf("/g/never after the refused multi: %v, %v", ok, err)
	}
	_, stat, err := conn.Get("/g/e")
	if err != nil || stat.EphemeralOwner != conn.SessionID() {
		t.Fatalf("ephemeral made by multi: %+v, %v", stat, err)
	}
}

// TestCreateNeverMakesItsParent: a ZooKeeper create racing the delete of
// its parent either lands first (and the delete fails NotEmpty) or fails
// NoNode; never do both succeed (which would mean the create made the
// parent again). Plain creates and creates in a multi alike.
func TestCreateNeverMakesItsParent(t *testing.T) {
	c := startZK(t, 1, Config{})
	deleter, _ := connect(t, c.addrs, 5*time.Second)
	creator, _ := connect(t, c.addrs, 5*time.Second)
	const rounds = 40
	outcomes := map[string]int{}
	for i := range rounds {
		parent := fmt.Sprintf("/race%d", i)
		if _, err := deleter.Create(parent, nil, 0, openACL); err != nil {
			t.Fatalf("create %s: %v", parent, err)
		}
		var wg sync.WaitGroup
		var delErr, createErr error
		wg.Add(2)
		go func() { defer wg.Done(); delErr = deleter.Delete(parent, -1) }()
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_, createErr = creator.Create(parent+"/child", nil, 0, openACL)
			} else {
				_, createErr = creator.Multi(&zk.CreateRequest{Path: parent + "/child", Acl: openACL})
			}
		}()
		wg.Wait()
		switch {
		case delErr == nil && createErr == nil:
			t.Fatalf("round %d: both the delete of %s and the create of its child succeeded: the create made the parent again", i, parent)
		case delErr == nil && !errors.Is(createErr, zk.ErrNoNode):
			t.Fatalf("round %d: parent deleted, create = %v, want ErrNoNode", i, createErr)
		case createErr == nil && !errors.Is(delErr, zk.ErrNotEmpty):
			t.Fatalf("round %d: child created, delete = %v, want ErrNotEmpty", i, delErr)
		}
		exists, _, err := deleter.Exists(parent)
		if err != nil || exists != (createErr == nil) {
			t.Fatalf("round %d: %s exists = %v, %v; the create %v", i, parent, exists, err, createErr)
		}
		outcomes[fmt.Sprint(delErr == nil)]++
	}
	t.Logf("outcomes (delete won: count): %v", outcomes)
}

// TestMultiLimit: a multi is at most api.MaxTxnOps latch operations (a
// create counts two): one over is refused whole, in the reply header, and
// applies nothing.
func TestMultiLimit(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	creates := func(prefix string, n int) []zkOp {
		ops := make([]zkOp, n)
		for i := range ops {
			ops[i] = mcreate(fmt.Sprintf("%s%03d", prefix, i), 0)
		}
		return ops
	}
	const maxCreates = api.MaxTxnOps / 2
	if got := r.callMulti(creates("/fit", maxCreates)...); len(got.headers) != maxCreates || got.headers[0].Err != zkproto.ErrOK {
		t.Fatalf("multi of %d creates = %+v", maxCreates, got.codes())
	}
	h, _ := r.call(zkproto.OpMulti, multiRequest(creates("/over", maxCreates+1)))
	if h.Err != zkproto.ErrBadArguments {
		t.Fatalf("multi of %d creates answered %d, want BadArguments", maxCreates+1, h.Err)
	}
	if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/over000"}); h.Err != zkproto.ErrNoNode {
		t.Fatalf("a node of the refused multi exists: %d", h.Err)
	}
}
