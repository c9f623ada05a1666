package zkserver

import (
	"testing"

	"github.com/latch-io/latch/internal/zkproto"
)

// TestMiscOpcodes: check, getEphemerals, getAllChildrenNumber, whoAmI,
// auth, create2 with its Stat, createContainer and getACL/setACL answer as
// docs/zookeeper.md says.
func TestMiscOpcodes(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	sess := r.session()

	h, rest := r.call(zkproto.OpCreate2, &zkproto.CreateRequest{Path: "/m", Data: []byte("abc"), ACL: worldAnyone})
	mustOK(t, "create2", h)
	var c2 zkproto.Create2Response
	if err := zkproto.Decode(rest, &c2, "Create2Response"); err != nil {
		t.Fatal(err)
	}
	if c2.Path != "/m" || c2.Stat.Version != 0 || c2.Stat.DataLength != 3 || c2.Stat.Czxid == 0 || c2.Stat.Czxid > h.Zxid || c2.Stat.Mzxid != c2.Stat.Czxid {
		t.Fatalf("create2 = %+v (zxid %d)", c2, h.Zxid)
	}
	mustOK(t, "createContainer", firstHeader(r.call(zkproto.OpCreateContainer, &zkproto.CreateRequest{Path: "/m/box", ACL: worldAnyone, Flags: zkproto.ModeContainer})))
	for _, p := range []string{"/m/e1", "/m/box/e2"} {
		mustOK(t, "create "+p, firstHeader(r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: p, ACL: worldAnyone, Flags: zkproto.ModeEphemeral})))
	}
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/m/noacl"}); h.Err != zkproto.ErrInvalidACL {
		t.Fatalf("create without ACL = %d, want InvalidACL", h.Err)
	}
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/m/ttl", ACL: worldAnyone, Flags: zkproto.ModePersistentWithTTL}); h.Err != zkproto.ErrUnimplemented {
		t.Fatalf("create with a TTL mode = %d, want Unimplemented", h.Err)
	}

	mustOK(t, "check", firstHeader(r.call(zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: "/m", Version: 0})))
	if h, _ := r.call(zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: "/m", Version: 1}); h.Err != zkproto.ErrBadVersion {
		t.Fatalf("check at a wrong version = %d", h.Err)
	}
	if h, _ := r.call(zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: "/none", Version: -1}); h.Err != zkproto.ErrNoNode {
		t.Fatalf("check of a missing node = %d", h.Err)
	}

	h, rest = r.call(zkproto.OpGetEphemerals, &zkproto.PathRequest{Path: "/m/box"})
	mustOK(t, "getEphemerals", h)
	var eph zkproto.GetChildrenResponse
	if err := zkproto.Decode(rest, &eph, "GetEphemeralsResponse"); err != nil {
		t.Fatal(err)
	}
	if len(eph.Children) != 1 || eph.Children[0] != "/m/box/e2" {
		t.Fatalf("getEphemerals /m/box = %v", eph.Children)
	}
	h, rest = r.call(zkproto.OpGetAllChildrenNumber, &zkproto.PathRequest{Path: "/m"})
	mustOK(t, "getAllChildrenNumber", h)
	var count zkproto.IntResponse
	if err := zkproto.Decode(rest, &count, "GetAllChildrenNumberResponse"); err != nil || count.Value != 3 {
		t.Fatalf("getAllChildrenNumber /m = %d, %v; want 3", count.Value, err)
	}

	h, rest = r.call(zkproto.OpWhoAmI, nil)
	mustOK(t, "whoAmI", h)
	rd := zkproto.NewReader(rest)
	if n := rd.VectorLen("clientInfo", 8); n != 1 || rd.String("scheme") != "ip" || rd.String("user") != "127.0.0.1" {
		t.Fatalf("whoAmI = %x", rest)
	}

	if h, _ := r.sendAndReply(zkproto.XidAuth, zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("u:p")}); h.Err != zkproto.ErrOK || h.Xid != zkproto.XidAuth {
		t.Fatalf("digest auth = %+v", h)
	}

	h, rest = r.call(zkproto.OpGetACL, &zkproto.PathRequest{Path: "/m"})
	mustOK(t, "getACL", h)
	var acl zkproto.GetACLResponse
	if err := zkproto.Decode(rest, &acl, "GetACLResponse"); err != nil || len(acl.ACL) != 1 || acl.ACL[0] != worldAnyone[0] {
		t.Fatalf("getACL = %+v, %v", acl, err)
	}
	setACL := &zkproto.SetACLRequest{Path: "/m", ACL: []zkproto.ACL{{Perms: zkproto.PermRead, ID: zkproto.ID{Scheme: "digest", ID: "u:x"}}}, Version: -1}
	mustOK(t, "setACL", firstHeader(r.call(zkproto.OpSetACL, setACL)))
	setACL.Version = 3
	if h, _ := r.call(zkproto.OpSetACL, setACL); h.Err != zkproto.ErrBadVersion {
		t.Fatalf("setACL at aversion 3 = %d, want BadVersion", h.Err)
	}

	other := dialRaw(t, c.addrs[0])
	other.session()
	if h, _ := other.call(zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/m/e1", Version: -1}); h.Err != zkproto.ErrNoAuth {
		t.Fatalf("deleting another session's ephemeral = %d, want NoAuth", h.Err)
	}
	h, rest = other.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/m/e1"})
	var st zkproto.StatResponse
	if err := zkproto.Decode(rest, &st, "StatResponse"); err != nil || h.Err != zkproto.ErrOK || st.Stat.EphemeralOwner == 0 || st.Stat.EphemeralOwner == sess.SessionID {
		t.Fatalf("exists of another's ephemeral = %+v, %v: owner must be nonzero and not the owner's id", st, err)
	}
	// A wrong auth scheme ends the connection after AuthFailed.
	if h, _ := r.sendAndReply(zkproto.XidAuth, zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "sasl"}); h.Err != zkproto.ErrAuthFailed {
		t.Fatalf("sasl auth packet = %+v, want AuthFailed", h)
	}
	if !r.closed() {
		t.Fatal("connection open after AuthFailed")
	}
}

// TestReadsNeverOlderThanSeen: a client that saw a write on one member
// reads it on another, reconnecting with lastZxidSeen; a sync makes a
// read on another member see every acknowledged write.
func TestReadsNeverOlderThanSeen(t *testing.T) {
	c := startZK(t, 3, Config{})
	w := dialRaw(t, c.addrs[0])
	w.session()
	h, _ := w.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/seen", Data: []byte("1"), ACL: worldAnyone})
	mustOK(t, "create", h)

	r := dialRaw(t, c.addrs[1])
	if _, err := r.connect(zkproto.ConnectRequest{TimeOut: 5000, LastZxidSeen: h.Zxid, Passwd: make([]byte, 16)}); err != nil {
		t.Fatalf("connect with lastZxidSeen %d: %v", h.Zxid, err)
	}
	if h2, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/seen"}); h2.Err != zkproto.ErrOK || h2.Zxid < h.Zxid {
		t.Fatalf("read after connecting with lastZxidSeen %d = %+v", h.Zxid, h2)
	}

	h, _ = w.call(zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/seen", Data: []byte("2"), Version: -1})
	mustOK(t, "set", h)
	s := dialRaw(t, c.addrs[2])
	s.session()
	mustOK(t, "sync", firstHeader(s.call(zkproto.OpSync, &zkproto.PathRequest{Path: "/seen"})))
	h2, rest := s.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/seen"})
	var got zkproto.GetDataResponse
	if err := zkproto.Decode(rest, &got, "GetDataResponse"); err != nil || string(got.Data) != "2" || h2.Zxid < h.Zxid {
		t.Fatalf("read after sync on another member = %q (zxid %d), %v; want the acknowledged write (zxid %d)", got.Data, h2.Zxid, err, h.Zxid)
	}
}

// sendAndReply sends a request with a given xid and returns the next frame.
func (r *rawClient) sendAndReply(xid int32, op zkproto.OpCode, body zkproto.Record) (zkproto.ReplyHeader, []byte) {
	r.t.Helper()
	r.sendXid(xid, op, body)
	return r.reply()
}
