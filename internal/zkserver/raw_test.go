package zkserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/zkproto"
)

// rawClient speaks the protocol frame by frame, to test what the real
// clients do not exercise.
type rawClient struct {
	t   *testing.T
	nc  net.Conn
	br  *bufio.Reader
	xid int32
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// connect sends req and returns the reply, or the read error (the server
// closed the connection).
func (r *rawClient) connect(req zkproto.ConnectRequest) (zkproto.ConnectResponse, error) {
	r.t.Helper()
	if err := zkproto.WriteFrame(r.nc, zkproto.Encode(&req)); err != nil {
		r.t.Fatalf("write connect: %v", err)
	}
	frame, err := zkproto.ReadFrame(r.br, 0)
	if err != nil {
		return zkproto.ConnectResponse{}, err
	}
	var resp zkproto.ConnectResponse
	if err := zkproto.Decode(frame, &resp, "ConnectResponse"); err != nil {
		r.t.Fatalf("decode connect response: %v", err)
	}
	return resp, nil
}

// sessionRequest asks for a new session with the trailing readOnly byte.
func sessionRequest() zkproto.ConnectRequest {
	return zkproto.ConnectRequest{TimeOut: 10000, Passwd: make([]byte, 16), HasReadOnly: true}
}

// session opens a new session with the trailing readOnly byte.
func (r *rawClient) session() zkproto.ConnectResponse {
	r.t.Helper()
	resp, err := r.connect(sessionRequest())
	if err != nil || resp.SessionID == 0 {
		r.t.Fatalf("connect = %+v, %v", resp, err)
	}
	return resp
}

// send writes one request and returns its xid.
func (r *rawClient) send(op zkproto.OpCode, body zkproto.Record) int32 {
	r.t.Helper()
	r.xid++
	return r.sendXid(r.xid, op, body)
}

func (r *rawClient) sendXid(xid int32, op zkproto.OpCode, body zkproto.Record) int32 {
	r.t.Helper()
	if _, err := r.nc.Write(r.frame(nil, xid, op, body)); err != nil {
		r.t.Fatalf("write request: %v", err)
	}
	return xid
}

// sendAll sends a request of op for each body, with the next xids, in one
// write: they are all in the server's socket before it reads the first, so
// a server that ends the connection after some of them cannot fail the
// sending of the rest (broken pipe).
func (r *rawClient) sendAll(op zkproto.OpCode, bodies []zkproto.Record) {
	r.t.Helper()
	var buf []byte
	for _, body := range bodies {
		r.xid++
		buf = r.frame(buf, r.xid, op, body)
	}
	if _, err := r.nc.Write(buf); err != nil {
		r.t.Fatalf("write %d requests: %v", len(bodies), err)
	}
}

// frame appends the frame of request xid, op, body to buf.
func (r *rawClient) frame(buf []byte, xid int32, op zkproto.OpCode, body zkproto.Record) []byte {
	r.t.Helper()
	w := zkproto.NewWriter(nil)
	(&zkproto.RequestHeader{Xid: xid, Type: op}).Encode(w)
	if body != nil {
		body.Encode(w)
	}
	buf, err := zkproto.AppendFrame(buf, w.Bytes())
	if err != nil {
		r.t.Fatalf("frame request: %v", err)
	}
	return buf
}

// reply reads the next frame: its header and the rest.
func (r *rawClient) reply() (zkproto.ReplyHeader, []byte) {
	r.t.Helper()
	frame, err := zkproto.ReadFrame(r.br, 0)
	if err != nil {
		r.t.Fatalf("read reply: %v", err)
	}
	rd := zkproto.NewReader(frame)
	var h zkproto.ReplyHeader
	h.Decode(rd)
	if rd.Err() != nil {
		r.t.Fatalf("reply header: %v", rd.Err())
	}
	return h, frame[rd.Offset():]
}

// call sends a request and reads its reply, which must be the next frame.
func (r *rawClient) call(op zkproto.OpCode, body zkproto.Record) (zkproto.ReplyHeader, []byte) {
	r.t.Helper()
	xid := r.send(op, body)
	h, rest := r.reply()
	if h.Xid != xid {
		r.t.Fatalf("reply xid %d, want %d", h.Xid, xid)
	}
	return h, rest
}

// closed reports whether the server closed the connection.
func (r *rawClient) closed() bool {
	_, err := r.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset"))
}

// TestHandshakeForms: the connect reply has the readOnly byte exactly when
// the request had it; a resumed session keeps its id and timeout; a wrong
// password and an unknown session get timeout 0 (expired) and a close.
func TestHandshakeForms(t *testing.T) {
	c := startZK(t, 1, Config{})
	with := dialRaw(t, c.addrs[0])
	resp := with.session()
	if !resp.HasReadOnly || len(resp.Passwd) != 16 || resp.TimeOut != 10000 {
		t.Fatalf("reply to a request with readOnly = %+v", resp)
	}
	without := dialRaw(t, c.addrs[0])
	resp2, err := without.connect(zkproto.ConnectRequest{TimeOut: 500, Passwd: make([]byte, 16)})
	if err != nil || resp2.HasReadOnly || resp2.TimeOut != 1000 {
		t.Fatalf("reply to a request without readOnly = %+v, %v (want no readOnly byte, timeout clamped up to 1000)", resp2, err)
	}
	big := dialRaw(t, c.addrs[0])
	if resp3, err := big.connect(zkproto.ConnectRequest{TimeOut: 1 << 30, Passwd: make([]byte, 16)}); err != nil || resp3.TimeOut != 30000 {
		t.Fatalf("reply to a huge timeout = %+v, %v (want clamped down to 30000)", resp3, err)
	}

	resume := dialRaw(t, c.addrs[0])
	got, err := resume.connect(zkproto.ConnectRequest{TimeOut: 4000, SessionID: resp.SessionID, Passwd: resp.Passwd})
	if err != nil || got.SessionID != resp.SessionID || got.TimeOut != resp.TimeOut || string(got.Passwd) != string(resp.Passwd) {
		t.Fatalf("resume = %+v, %v; want session %#x with its timeout", got, err, resp.SessionID)
	}
	wrong := dialRaw(t, c.addrs[0])
	bad := append([]byte(nil), resp.Passwd...)
	bad[0] ^= 1
	got, err = wrong.connect(zkproto.ConnectRequest{SessionID: resp.SessionID, Passwd: bad})
	if err != nil || got.TimeOut != 0 || got.SessionID != 0 || !wrong.closed() {
		t.Fatalf("wrong password = %+v, %v; want timeout 0, session 0, then a close", got, err)
	}
	unknown := dialRaw(t, c.addrs[0])
	got, err = unknown.connect(zkproto.ConnectRequest{SessionID: 12345, Passwd: sessionPassword(12345)})
	if err != nil || got.TimeOut != 0 || !unknown.closed() {
		t.Fatalf("unknown session = %+v, %v; want timeout 0 then a close", got, err)
	}
	ahead := dialRaw(t, c.addrs[0])
	if got, err := ahead.connect(zkproto.ConnectRequest{LastZxidSeen: 1 << 40, Passwd: make([]byte, 16)}); err == nil {
		t.Fatalf("a client that saw zxid 2^40 got %+v; want the connection refused", got)
	}
}

// TestPipelining: many requests in flight on one connection are answered
// in order, each with a zxid, the zxids never decreasing; an opcode latch
// does not serve (reconfig) gets Unimplemented and the connection stays.
func TestPipelining(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	const n = 200
	var xids []int32
	for i := range n {
		switch i % 4 {
		case 0:
			xids = append(xids, r.send(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/p" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), ACL: worldAnyone}))
		case 1:
			xids = append(xids, r.send(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/"}))
		case 2:
			xids = append(xids, r.send(zkproto.OpReconfig, nil))
		case 3:
			xids = append(xids, r.send(zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/"}))
		}
	}
	var last int64
	for i, xid := range xids {
		h, _ := r.reply()
		if h.Xid != xid {
			t.Fatalf("reply %d has xid %d, want %d: out of order", i, h.Xid, xid)
		}
		if h.Zxid < last || h.Zxid == 0 {
			t.Fatalf("reply %d has zxid %d after %d", i, h.Zxid, last)
		}
		last = h.Zxid
		if i%4 == 2 && h.Err != zkproto.ErrUnimplemented {
			t.Fatalf("reconfig answered %d, want Unimplemented", h.Err)
		}
		if i%4 != 2 && h.Err != zkproto.ErrOK {
			t.Fatalf("request %d answered %d", i, h.Err)
		}
	}
	if h, _ := r.call(zkproto.OpPing, nil); h.Err != zkproto.ErrOK {
		t.Fatalf("ping after the pipeline: %d", h.Err)
	}
}

// TestRepliesLeftBufferedAreSent: the reader leaves a read's reply buffered
// only while the next request is whole in its buffer. Pipelined reads sent
// in one write are all answered, in order; a read followed by part of the
// next frame, or by a frame no reader takes (a negative length), gets its
// reply before that frame is whole, or before the connection ends.
func TestRepliesLeftBufferedAreSent(t *testing.T) {
	c := startZK(t, 1, Config{})
	exists := &zkproto.PathWatchRequest{Path: "/"}

	t.Run("pipelined reads", func(t *testing.T) {
		r := dialRaw(t, c.addrs[0])
		r.session()
		const n = 100
		first := r.xid + 1
		r.sendAll(zkproto.OpExists, slices.Repeat([]zkproto.Record{exists}, n))
		for i := range int32(n) {
			if h, _ := r.reply(); h.Xid != first+i || h.Err != zkproto.ErrOK {
				t.Fatalf("reply %d = %+v, want xid %d, no error", i, h, first+i)
			}
		}
	})

	for _, cut := range []int{2, 4, 9} { // in the length, after it, in the body
		t.Run(fmt.Sprintf("a read then %d bytes of the next frame", cut), func(t *testing.T) {
			r := dialRaw(t, c.addrs[0])
			r.session()
			a := r.frame(nil, 1, zkproto.OpExists, exists)
			b := r.frame(nil, 2, zkproto.OpExists, exists)
			if _, err := r.nc.Write(append(a, b[:cut]...)); err != nil {
				t.Fatal(err)
			}
			_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if h, _ := r.reply(); h.Xid != 1 { // a reply left buffered would never come
				t.Fatalf("first reply has xid %d, want 1", h.Xid)
			}
			if _, err := r.nc.Write(b[cut:]); err != nil {
				t.Fatal(err)
			}
			if h, _ := r.reply(); h.Xid != 2 {
				t.Fatalf("second reply has xid %d, want 2", h.Xid)
			}
		})
	}

	t.Run("a read then a read that waits", func(t *testing.T) {
		// The second read sets a watch, so it may wait (here: its read is
		// held until the first reply has arrived). The first reply must not
		// wait in the buffer for it.
		var reads atomic.Int32
		arrived := make(chan struct{})
		hold := func() {
			if reads.Add(1) == 2 {
				select {
				case <-arrived:
				case <-time.After(20 * time.Second):
				}
			}
		}
		c.listeners[0].beforeRead.Store(&hold)
		defer c.listeners[0].beforeRead.Store(nil)
		r := dialRaw(t, c.addrs[0])
		r.session()
		buf := r.frame(nil, 1, zkproto.OpExists, exists)
		buf = r.frame(buf, 2, zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/", Watch: true})
		if _, err := r.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if h, _ := r.reply(); h.Xid != 1 { // held with the second, it would come after 20 s
			t.Fatalf("first reply has xid %d, want 1", h.Xid)
		}
		close(arrived)
		if h, _ := r.reply(); h.Xid != 2 {
			t.Fatalf("second reply has xid %d, want 2", h.Xid)
		}
	})

	t.Run("reads between requests the sender answers", func(t *testing.T) {
		r := dialRaw(t, c.addrs[0])
		r.session()
		var buf []byte
		buf = r.frame(buf, 1, zkproto.OpExists, exists)
		buf = r.frame(buf, 2, zkproto.OpCreate, &zkproto.CreateRequest{Path: "/buffered", ACL: worldAnyone})
		buf = r.frame(buf, 3, zkproto.OpExists, exists)
		buf = r.frame(buf, 4, zkproto.OpSetData, &zkproto.PathRequest{Path: "/buffered"}) // a body that does not decode
		buf = r.frame(buf, 5, zkproto.OpExists, exists)
		buf = r.frame(buf, 6, zkproto.OpCloseSession, nil)
		if _, err := r.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		want := []zkproto.ErrCode{zkproto.ErrOK, zkproto.ErrOK, zkproto.ErrOK, zkproto.ErrMarshallingError, zkproto.ErrOK, zkproto.ErrOK}
		for i, code := range want {
			if h, _ := r.reply(); h.Xid != int32(i+1) || h.Err != code {
				t.Fatalf("reply %d = xid %d, code %d; want xid %d, code %d", i, h.Xid, h.Err, i+1, code)
			}
		}
		if !r.closed() {
			t.Fatal("the connection stayed open after closeSession")
		}
	})

	t.Run("a read then a negative length", func(t *testing.T) {
		r := dialRaw(t, c.addrs[0])
		r.session()
		buf := append(r.frame(nil, 1, zkproto.OpExists, exists), 0xff, 0xff, 0xff, 0xf0)
		if _, err := r.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if h, _ := r.reply(); h.Xid != 1 {
			t.Fatalf("reply has xid %d, want 1", h.Xid)
		}
		if !r.closed() {
			t.Fatal("the connection stayed open after a negative frame length")
		}
	})
}

// TestUnknownOpcodesKeepTheConnection: every opcode latch does not serve
// gets Unimplemented, and a malformed body MarshallingError; the
// connection serves the next request.
func TestUnknownOpcodesKeepTheConnection(t *testing.T) {
	c := startZK(t, 1, Config{})
	r := dialRaw(t, c.addrs[0])
	r.session()
	for _, op := range []zkproto.OpCode{zkproto.OpReconfig, zkproto.OpSASL, 55, -10, zkproto.OpCreateTTL, zkproto.OpDeleteContainer} {
		var body zkproto.Record
		switch op {
		case zkproto.OpCreateTTL:
			body = &zkproto.CreateTTLRequest{Path: "/ttl", ACL: worldAnyone, Flags: 5, TTL: 1000}
		case zkproto.OpDeleteContainer:
			body = &zkproto.DeleteRequest{Path: "/x", Version: -1}
		}
		if h, _ := r.call(op, body); h.Err != zkproto.ErrUnimplemented {
			t.Fatalf("opcode %d answered %d, want Unimplemented", op, h.Err)
		}
	}
	w := zkproto.NewWriter(nil)
	(&zkproto.RequestHeader{Xid: 900, Type: zkproto.OpGetData}).Encode(w)
	w.Int(1 << 20) // a path length beyond the frame
	if err := zkproto.WriteFrame(r.nc, w.Bytes()); err != nil {
		t.Fatal(err)
	}
	if h, _ := r.reply(); h.Xid != 900 || h.Err != zkproto.ErrMarshallingError {
		t.Fatalf("malformed getData answered %+v, want MarshallingError", h)
	}
	if h, _ := r.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "bad"}); h.Err != zkproto.ErrBadArguments {
		t.Fatalf("relative path answered %d, want BadArguments", h.Err)
	}
	if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/"}); h.Err != zkproto.ErrOK {
		t.Fatalf("exists / after the bad requests answered %d", h.Err)
	}
}

// fourLetterWord sends word on a new connection to addr and returns the
// answer.
func fourLetterWord(t *testing.T, addr, word string) string {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return readWord(t, nc, word)
}

// readWord sends word on nc and returns the answer, up to the server's
// close; it closes nc.
func readWord(t *testing.T, nc net.Conn, word string) string {
	t.Helper()
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte(word)); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(nc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestFourLetterWords: whitelisted words answer in ZooKeeper's format,
// others get ZooKeeper's refusal.
func TestFourLetterWords(t *testing.T) {
	c := startZK(t, 1, Config{FourLetterWords: []string{"ruok", "srvr", "mntr", "conf", "isro", "stat"}})
	if got := fourLetterWord(t, c.addrs[0], "ruok"); got != "imok" {
		t.Fatalf("ruok = %q", got)
	}
	if got := fourLetterWord(t, c.addrs[0], "isro"); got != "rw" {
		t.Fatalf("isro = %q", got)
	}
	srvr := fourLetterWord(t, c.addrs[0], "srvr")
	for _, want := range []string{"Zookeeper version: ", "Mode: standalone\n", "Node count: ", "Zxid: 0x"} {
		if !strings.Contains(srvr, want) {
			t.Fatalf("srvr = %q, lacks %q", srvr, want)
		}
	}
	mntr := fourLetterWord(t, c.addrs[0], "mntr")
	if !strings.Contains(mntr, "zk_server_state\tstandalone\n") || !strings.Contains(mntr, "zk_znode_count\t") {
		t.Fatalf("mntr = %q", mntr)
	}
	if conf := fourLetterWord(t, c.addrs[0], "conf"); !strings.Contains(conf, "maxSessionTimeout=30000\n") {
		t.Fatalf("conf = %q", conf)
	}
	if stat := fourLetterWord(t, c.addrs[0], "stat"); !strings.Contains(stat, "Clients:\n") {
		t.Fatalf("stat = %q", stat)
	}
	d := startZK(t, 1, Config{FourLetterWords: DefaultFourLetterWords})
	if got := fourLetterWord(t, d.addrs[0], "ruok"); got != "ruok is not executed because it is not in the whitelist.\n" {
		t.Fatalf("ruok outside the whitelist = %q", got)
	}
	if got := fourLetterWord(t, d.addrs[0], "srvr"); !strings.HasPrefix(got, "Zookeeper version: ") {
		t.Fatalf("srvr on the default whitelist = %q", got)
	}
}
