package zkproto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var testStat = Stat{
	Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5, Cversion: 6, Aversion: 7,
	EphemeralOwner: 0x1122334455667788, DataLength: 9, NumChildren: 10, Pzxid: 11,
}

var worldAnyone = []ACL{{Perms: PermAll, ID: ID{Scheme: "world", ID: "anyone"}}}

// roundTripCases are one value of every record; fresh makes the zero value
// to decode into (with any form selector set).
var roundTripCases = []struct {
	name  string
	rec   Record
	fresh func() Record
}{
	{"connect request without readOnly", &ConnectRequest{LastZxidSeen: 7, TimeOut: 30000, SessionID: -5, Passwd: []byte("0123456789abcdef")}, func() Record { return &ConnectRequest{} }},
	{"connect request with readOnly", &ConnectRequest{TimeOut: 4000, Passwd: []byte{}, ReadOnly: true, HasReadOnly: true}, func() Record { return &ConnectRequest{} }},
	{"connect request null passwd", &ConnectRequest{TimeOut: 4000}, func() Record { return &ConnectRequest{} }},
	{"connect response without readOnly", &ConnectResponse{TimeOut: 30000, SessionID: 99, Passwd: []byte("pw")}, func() Record { return &ConnectResponse{} }},
	{"connect response with readOnly", &ConnectResponse{TimeOut: 30000, SessionID: 99, Passwd: []byte("pw"), HasReadOnly: true}, func() Record { return &ConnectResponse{} }},
	{"request header", &RequestHeader{Xid: 42, Type: OpCreate2}, func() Record { return &RequestHeader{} }},
	{"ping header", &RequestHeader{Xid: XidPing, Type: OpPing}, func() Record { return &RequestHeader{} }},
	{"reply header", &ReplyHeader{Xid: 42, Zxid: 1 << 40, Err: ErrNoNode}, func() Record { return &ReplyHeader{} }},
	{"stat", &Stat{Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5, Cversion: 6, Aversion: 7, EphemeralOwner: 8, DataLength: 9, NumChildren: 10, Pzxid: 11}, func() Record { return &Stat{} }},
	{"create request", &CreateRequest{Path: "/a/b", Data: []byte("v"), ACL: worldAnyone, Flags: ModeEphemeralSequential}, func() Record { return &CreateRequest{} }},
	{"create request null data and acl", &CreateRequest{Path: "/a"}, func() Record { return &CreateRequest{} }},
	{"create TTL request", &CreateTTLRequest{Path: "/t", Data: []byte{}, ACL: []ACL{}, Flags: ModePersistentWithTTL, TTL: 60000}, func() Record { return &CreateTTLRequest{} }},
	{"create response", &CreateResponse{Path: "/a/b0000000001"}, func() Record { return &CreateResponse{} }},
	{"create2 response", &Create2Response{Path: "/a", Stat: testStat}, func() Record { return &Create2Response{} }},
	{"delete request", &DeleteRequest{Path: "/a", Version: -1}, func() Record { return &DeleteRequest{} }},
	{"check version request", &CheckVersionRequest{Path: "/a", Version: 3}, func() Record { return &CheckVersionRequest{} }},
	{"exists/getData/getChildren request", &PathWatchRequest{Path: "/a", Watch: true}, func() Record { return &PathWatchRequest{} }},
	{"sync/getACL/getEphemerals request", &PathRequest{Path: "/"}, func() Record { return &PathRequest{} }},
	{"exists/setData response", &StatResponse{Stat: testStat}, func() Record { return &StatResponse{} }},
	{"getData response", &GetDataResponse{Data: []byte("hello"), Stat: testStat}, func() Record { return &GetDataResponse{} }},
	{"getData response null data", &GetDataResponse{Stat: testStat}, func() Record { return &GetDataResponse{} }},
	{"setData request", &SetDataRequest{Path: "/a", Data: []byte("x"), Version: 2}, func() Record { return &SetDataRequest{} }},
	{"getChildren response", &GetChildrenResponse{Children: []string{"a", "b", ""}}, func() Record { return &GetChildrenResponse{} }},
	{"getChildren response empty", &GetChildrenResponse{Children: []string{}}, func() Record { return &GetChildrenResponse{} }},
	{"getChildren2 response", &GetChildren2Response{Children: []string{"x"}, Stat: testStat}, func() Record { return &GetChildren2Response{} }},
	{"setACL request", &SetACLRequest{Path: "/a", ACL: worldAnyone, Version: 0}, func() Record { return &SetACLRequest{} }},
	{"getACL response", &GetACLResponse{ACL: worldAnyone, Stat: testStat}, func() Record { return &GetACLResponse{} }},
	{"watcher event", &WatcherEvent{Type: EventNodeChildrenChanged, State: StateSyncConnected, Path: "/a"}, func() Record { return &WatcherEvent{} }},
	{"session expired event", &WatcherEvent{Type: EventNone, State: StateExpired}, func() Record { return &WatcherEvent{} }},
	{"setWatches", &SetWatches{RelativeZxid: 9, DataWatches: []string{"/d"}, ExistWatches: []string{}, ChildWatches: []string{"/c", "/e"}}, func() Record { return &SetWatches{} }},
	{"setWatches2", &SetWatches{RelativeZxid: 9, DataWatches: []string{"/d"}, ExistWatches: []string{}, ChildWatches: []string{}, PersistentWatches: []string{"/p"}, PersistentRecursiveWatches: []string{"/r"}, Has2: true}, func() Record { return &SetWatches{Has2: true} }},
	{"multi header", &MultiHeader{Type: OpCreate, Done: false, Err: -1}, func() Record { return &MultiHeader{} }},
	{"multi done header", &MultiHeader{Type: -1, Done: true, Err: -1}, func() Record { return &MultiHeader{} }},
	{"error response", &ErrorResponse{Err: ErrBadVersion}, func() Record { return &ErrorResponse{} }},
	{"removeWatches request", &PathTypeRequest{Path: "/a", Type: 3}, func() Record { return &PathTypeRequest{} }},
	{"addWatch request", &PathTypeRequest{Path: "/a", Type: int32(AddWatchPersistentRecursive)}, func() Record { return &PathTypeRequest{} }},
	{"auth packet", &AuthPacket{Scheme: "digest", Auth: []byte("u:p")}, func() Record { return &AuthPacket{} }},
	{"getAllChildrenNumber response", &IntResponse{Value: 12}, func() Record { return &IntResponse{} }},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			buf := Encode(tc.rec)
			got := tc.fresh()
			if err := Decode(buf, got, tc.name); err != nil {
				t.Fatalf("decode %x: %v", buf, err)
			}
			if !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("round trip:\n got  %+v\n want %+v", got, tc.rec)
			}
			if again := Encode(got); !bytes.Equal(again, buf) {
				t.Fatalf("re-encode: got %x, want %x", again, buf)
			}
		})
	}
}

func TestRecordTruncationNamesFieldAndOffset(t *testing.T) {
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			buf := Encode(tc.rec)
			for cut := 0; cut < len(buf); cut++ {
				err := Decode(buf[:cut], tc.fresh(), tc.name)
				if err == nil {
					// A connect record cut exactly before its optional
					// trailing byte is the other valid form.
					continue
				}
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("cut at %d: error %v is not a *DecodeError", cut, err)
				}
				if de.Field == "" || de.Offset < 0 || de.Offset > cut {
					t.Fatalf("cut at %d: bad error %+v", cut, de)
				}
			}
		})
	}
}

func TestStatIs68Bytes(t *testing.T) {
	if n := len(Encode(&testStat)); n != 68 {
		t.Fatalf("Stat encodes to %d bytes, want 68", n)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenVectors pins the bytes of the handshake in both forms and of a
// create request, computed by hand from the jute definitions: int is 4
// bytes big-endian, long 8, boolean 1, buffer/ustring an int length then
// the bytes, vector an int count then the items.
func TestGoldenVectors(t *testing.T) {
	cases := []struct {
		name  string
		rec   Record
		fresh func() Record
		hex   string
	}{
		{
			// protocolVersion 0 | lastZxidSeen 0x0102 | timeOut 30000 =
			// 0x7530 | sessionId 0x1122334455667788 | passwd: length 2, "pw".
			// 34 bytes: the form older clients and go-zookeeper send.
			name:  "connect request, no readOnly",
			rec:   &ConnectRequest{LastZxidSeen: 0x0102, TimeOut: 30000, SessionID: 0x1122334455667788, Passwd: []byte("pw")},
			fresh: func() Record { return &ConnectRequest{} },
			hex: `00000000 0000000000000102 00007530 1122334455667788
			      00000002 7077`,
		},
		{
			// The same plus the trailing readOnly boolean (1 = true): 35 bytes.
			name:  "connect request, readOnly",
			rec:   &ConnectRequest{LastZxidSeen: 0x0102, TimeOut: 30000, SessionID: 0x1122334455667788, Passwd: []byte("pw"), ReadOnly: true, HasReadOnly: true},
			fresh: func() Record { return &ConnectRequest{} },
			hex: `00000000 0000000000000102 00007530 1122334455667788
			      00000002 7077 01`,
		},
		{
			// protocolVersion 0 | timeOut 4000 = 0xfa0 | sessionId | passwd
			// of 16 bytes 0x00..0x0f: 36 bytes.
			name:  "connect response, no readOnly",
			rec:   &ConnectResponse{TimeOut: 4000, SessionID: 0x1122334455667788, Passwd: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
			fresh: func() Record { return &ConnectResponse{} },
			hex: `00000000 00000fa0 1122334455667788
			      00000010 000102030405060708090a0b0c0d0e0f`,
		},
		{
			// The same plus readOnly false (0): 37 bytes.
			name:  "connect response, readOnly false",
			rec:   &ConnectResponse{TimeOut: 4000, SessionID: 0x1122334455667788, Passwd: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, HasReadOnly: true},
			fresh: func() Record { return &ConnectResponse{} },
			hex: `00000000 00000fa0 1122334455667788
			      00000010 000102030405060708090a0b0c0d0e0f 00`,
		},
		{
			// path "/a" (length 2, 2f 61) | data "x" (length 1, 78) | acl:
			// vector of 1: perms 31 = 0x1f, scheme "world" (length 5),
			// id "anyone" (length 6) | flags 3 (ephemeral sequential).
			name:  "create request",
			rec:   &CreateRequest{Path: "/a", Data: []byte("x"), ACL: worldAnyone, Flags: ModeEphemeralSequential},
			fresh: func() Record { return &CreateRequest{} },
			hex: `00000002 2f61 00000001 78
			      00000001 0000001f 00000005 776f726c64 00000006 616e796f6e65
			      00000003`,
		},
		{
			// xid 7 | type 1 (create).
			name:  "request header",
			rec:   &RequestHeader{Xid: 7, Type: OpCreate},
			fresh: func() Record { return &RequestHeader{} },
			hex:   `00000007 00000001`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := mustHex(t, tc.hex)
			if got := Encode(tc.rec); !bytes.Equal(got, want) {
				t.Fatalf("encode:\n got  %x\n want %x", got, want)
			}
			got := tc.fresh()
			if err := Decode(want, got, tc.name); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("decode:\n got  %+v\n want %+v", got, tc.rec)
			}
		})
	}
}

func TestConnectRequestReportsForm(t *testing.T) {
	base := Encode(&ConnectRequest{TimeOut: 1, Passwd: []byte{}})
	cases := []struct {
		name        string
		buf         []byte
		hasReadOnly bool
		readOnly    bool
		wantErr     bool
	}{
		{name: "no trailing byte", buf: base},
		{name: "readOnly true", buf: append(append([]byte{}, base...), 1), hasReadOnly: true, readOnly: true},
		{name: "readOnly false", buf: append(append([]byte{}, base...), 0), hasReadOnly: true},
		{name: "two trailing bytes", buf: append(append([]byte{}, base...), 0, 0), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c ConnectRequest
			err := Decode(tc.buf, &c, "ConnectRequest")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && (c.HasReadOnly != tc.hasReadOnly || c.ReadOnly != tc.readOnly) {
				t.Fatalf("HasReadOnly=%v ReadOnly=%v, want %v %v", c.HasReadOnly, c.ReadOnly, tc.hasReadOnly, tc.readOnly)
			}
		})
	}
}

func TestNewRequestBody(t *testing.T) {
	cases := []struct {
		op   OpCode
		want Record
	}{
		{OpCreate, &CreateRequest{}},
		{OpCreate2, &CreateRequest{}},
		{OpCreateContainer, &CreateRequest{}},
		{OpCreateTTL, &CreateTTLRequest{}},
		{OpDelete, &DeleteRequest{}},
		{OpCheck, &CheckVersionRequest{}},
		{OpExists, &PathWatchRequest{}},
		{OpGetData, &PathWatchRequest{}},
		{OpGetChildren2, &PathWatchRequest{}},
		{OpSync, &PathRequest{}},
		{OpGetEphemerals, &PathRequest{}},
		{OpSetData, &SetDataRequest{}},
		{OpSetACL, &SetACLRequest{}},
		{OpAddWatch, &PathTypeRequest{}},
		{OpAuth, &AuthPacket{}},
		{OpSetWatches, &SetWatches{}},
		{OpSetWatches2, &SetWatches{Has2: true}},
		{OpPing, nil},
		{OpMulti, nil},
		{OpCloseSession, nil},
		{OpCode(999), nil},
	}
	for _, tc := range cases {
		got, ok := NewRequestBody(tc.op)
		if ok != (tc.want != nil) || (ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("op %d: got %#v, %v; want %#v", tc.op, got, ok, tc.want)
		}
	}
}
