package zkserver

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/zkproto"
)

// frame encodes a request with header and body as one frame.
func frame(xid int32, op zkproto.OpCode, body zkproto.Record) []byte {
	w := zkproto.NewWriter(nil)
	(&zkproto.RequestHeader{Xid: xid, Type: op}).Encode(w)
	if body != nil {
		body.Encode(w)
	}
	out, _ := zkproto.AppendFrame(nil, w.Bytes())
	return out
}

// FuzzRequests: after a valid handshake, any bytes on the connection get
// replies or a close; never a panic, never a hang, and the member still
// serves new connections.
func FuzzRequests(f *testing.F) {
	f.Add(frame(1, zkproto.OpCreate, create("/f")))
	f.Add(append(frame(1, zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/f", Watch: true}), frame(2, zkproto.OpSetData, &zkproto.SetDataRequest{Path: "/f", Data: []byte("x"), Version: -1})...))
	f.Add(frame(1, zkproto.OpAddWatch, &zkproto.PathTypeRequest{Path: "/", Type: 1}))
	f.Add(frame(-8, zkproto.OpSetWatches2, &zkproto.SetWatches{Has2: true, RelativeZxid: 1, DataWatches: []string{"/a"}, ChildWatches: []string{"/"}}))
	f.Add(frame(1, zkproto.OpDelete, &zkproto.DeleteRequest{Path: "/f", Version: 0}))
	f.Add(frame(1, zkproto.OpMulti, nil))
	f.Add(frame(1, zkproto.OpMulti, multiRequest{mcreate("/f", 0), check("/f", 0), set("/f", "x", -1), del("/f", 1)}))
	f.Add(frame(1, zkproto.OpMultiRead, multiRequest{{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/"}}, {zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/f"}}}))
	f.Add(frame(1, zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: "/", Version: 7}))
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 1})
	addr := startZK(f, 1, Config{}).addrs[0] // one member for every input
	f.Fuzz(func(t *testing.T, data []byte) {
		r := dialRaw(t, addr)
		r.session()
		drive(t, r.nc, data)
		alive := dialRaw(t, addr)
		alive.session()
		if h, _ := alive.call(zkproto.OpPing, nil); h.Err != zkproto.ErrOK {
			t.Fatalf("ping after the input: %d", h.Err)
		}
	})
}

// FuzzFirstPacket: any first bytes (a connect request, a four-letter word,
// garbage) get an answer or a close, never a panic or a hang.
func FuzzFirstPacket(f *testing.F) {
	f.Add(zkproto.Encode(&zkproto.ConnectRequest{TimeOut: 3000, Passwd: make([]byte, 16)}))
	f.Add([]byte("ruok"))
	f.Add([]byte("mntr"))
	f.Add([]byte{0, 0, 0, 1, 0})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	addr := startZK(f, 1, Config{FourLetterWords: []string{"*"}}).addrs[0]
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		drive(t, nc, data)
	})
}

// drive writes data, half-closes, and reads until the server closes; a
// server still holding the connection open after 20s is a hang.
func drive(t *testing.T, nc net.Conn, data []byte) {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(data); err != nil && !isReset(err) {
		t.Fatalf("write: %v", err)
	}
	if tcp, ok := nc.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
	if _, err := io.Copy(io.Discard, nc); err != nil && !isReset(err) {
		t.Fatalf("the server neither answered nor closed: %v", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !errors.Is(err, os.ErrDeadlineExceeded)
}
