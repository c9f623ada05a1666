package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// rawEventStream is GET /v1/session/{id}/events read off the socket, so
// that the chunks of the chunked reply, one per flush, can be counted.
type rawEventStream struct {
	conn   net.Conn
	reader *bufio.Reader
}

func openRawEventStream(t *testing.T, base, session string) *rawEventStream {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /v1/session/%s/events HTTP/1.1\r\nHost: %s\r\n\r\n", session, u.Host)
	s := &rawEventStream{conn: conn, reader: bufio.NewReader(conn)}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	status, err := s.reader.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("open event stream: %q, %v", status, err)
	}
	for {
		line, err := s.reader.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			if first := s.chunk(t); first != ": open\n\n" {
				t.Fatalf("the stream's first chunk is %q, want the opening comment \": open\"", first)
			}
			return s
		}
		if strings.EqualFold(line, "Transfer-Encoding: chunked\r\n") {
			continue
		}
	}
}

// chunk returns the next chunk of the reply's body.
func (s *rawEventStream) chunk(t *testing.T) string {
	t.Helper()
	line, err := s.reader.ReadString('\n')
	if err != nil {
		t.Fatalf("read chunk size: %v", err)
	}
	size, err := strconv.ParseUint(strings.TrimSpace(line), 16, 32)
	if err != nil {
		t.Fatalf("chunk size %q: %v", line, err)
	}
	data := make([]byte, size+2) // and its CRLF
	if _, err := io.ReadFull(s.reader, data); err != nil {
		t.Fatalf("read chunk: %v", err)
	}
	return string(data[:size])
}

// TestEventStreamSendsABurstInFewWrites: the events one applied entry
// queues for a session at once (a transaction's 100 creates under a
// recursively watched node) reach the client complete, in order and each
// once, with fewer flushes than events: the stream writer takes what is
// queued in one go and flushes once the queue is drained, not after every
// event.
func TestEventStreamSendsABurstInFewWrites(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := openSession(t, ctx, base)
	stream := openRawEventStream(t, base, session.SessionID)
	if err := testcluster.Do(ctx, "PUT", base, "/v1/kv/burst", nil, api.PutRequest{Value: ""}, nil); err != nil {
		t.Fatal(err)
	}
	var watch api.Watch
	if err := testcluster.Do(ctx, "POST", base, "/v1/watch", nil, api.WatchRequest{Path: "/burst", SessionID: session.SessionID, Recursive: true, Persistent: true}, &watch); err != nil {
		t.Fatal(err)
	}
	const creates = 100
	ops := make([]api.TxnOp, creates)
	for i := range ops {
		ops[i] = api.TxnOp{Op: api.TxnCreate, Path: fmt.Sprintf("/burst/n%03d", i)}
	}
	var txn api.Txn
	if err := testcluster.Do(ctx, "POST", base, "/v1/txn", nil, api.TxnRequest{Ops: ops}, &txn); err != nil {
		t.Fatal(err)
	}

	want := creates + 1 // and CHILDREN_CHANGED on /burst, once for the entry
	var events []api.Event
	chunks := 0
	for len(events) < want {
		chunk := stream.chunk(t)
		if strings.HasPrefix(chunk, ": ping") {
			continue
		}
		chunks++
		for record := range strings.SplitSeq(strings.TrimSuffix(chunk, "\n\n"), "\n\n") {
			data, ok := strings.CutPrefix(record, "data: ")
			var ev api.Event
			if !ok || json.Unmarshal([]byte(data), &ev) != nil {
				t.Fatalf("chunk %d: record %q is not an event's data line", chunks, record)
			}
			events = append(events, ev)
		}
	}
	created := map[string]bool{}
	for _, ev := range events {
		if ev.WatchID != watch.WatchID || ev.Index != txn.Index {
			t.Fatalf("event %+v, want watch %s's at index %d", ev, watch.WatchID, txn.Index)
		}
		switch {
		case ev.Event == api.EventChildrenChanged && ev.Path == "/burst" && !created["/burst"]:
			created["/burst"] = true
		case ev.Event == api.EventCreated && strings.HasPrefix(ev.Path, "/burst/n") && !created[ev.Path]:
			created[ev.Path] = true
		default:
			t.Fatalf("unexpected or repeated event %+v", ev)
		}
	}
	if len(events) != want {
		t.Fatalf("%d events, want %d", len(events), want)
	}
	if chunks >= want {
		t.Fatalf("%d events came in %d flushes: one per event", want, chunks)
	}
	t.Logf("%d events in %d flushes", want, chunks)
}
