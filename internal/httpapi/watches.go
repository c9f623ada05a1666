package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// sseOpen is the comment an event stream starts with.
const sseOpen = ": open\n\n"

// ssePing is how often an idle event stream carries a comment, so proxies
// keep it open and a vanished client is noticed.
const ssePing = 15 * time.Second

func (h *Handler) addWatch(w http.ResponseWriter, r *http.Request) {
	req, session, err := decodeWithSession(h, w, r, func(q *api.WatchRequest) string { return q.SessionID })
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.Watch(r.Context(), session, server.WatchRequest{
		Path: req.Path, Recursive: req.Recursive, Persistent: req.Persistent, KnownIndex: req.KnownIndex,
		KnownIndexes: req.KnownIndexes,
	})
	h.replyIn(w, out.Shard, out, out.Index, err)
}

func (h *Handler) cancelWatch(w http.ResponseWriter, r *http.Request) {
	p := requestParams(r, "session_id")
	session := p.id("session_id")
	id, err := parseID("watch id", r.PathValue("id"))
	if err != nil {
		h.badPathID(w, r, err)
		return
	}
	switch {
	case p.err != nil:
		err = p.err
	case session == 0:
		err = api.Errorf(api.CodeInvalidArgument, "session_id is required")
	}
	if err == nil {
		err = h.authorizeSession(r.Context(), session)
	}
	if err == nil {
		err = h.server.CancelWatch(session, id)
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSONIn(w, metaShard, h.server.AppliedIndex(), map[string]bool{"cancelled": true})
}

// events streams a session's watch events as Server-Sent Events: one JSON
// api.Event per "data:" line, and a last "event: end" whose data gives the
// reason when the server ends the stream.
//
// HEAD is refused before it gets here (the route's noHead): a stream
// without a body would replace the session's real one.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	session, err := parseID("session id", r.PathValue("id"))
	if err != nil {
		h.badPathID(w, r, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		h.writeError(w, api.Errorf(api.CodeInternal, "streaming unsupported by this connection"))
		return
	}
	stream, index, err := h.server.Events(r.Context(), session)
	if err != nil {
		h.writeError(w, err)
		return
	}
	defer stream.Close()
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set(api.HeaderIndex, strconv.FormatUint(index, 10))
	w.WriteHeader(http.StatusOK)
	// The opening comment goes with the headers. It tells a client that
	// reads the body that the stream is attached, and it makes the first
	// write into the reply's buffer (and the client's first read into its
	// own) happen now: memory fresh from the kernel costs a page fault on
	// first touch (13 µs on the benchmark machine), which a fan-out to
	// 10,000 new streams would otherwise pay on its first notification.
	if _, err := io.WriteString(w, sseOpen); err != nil {
		return
	}
	flusher.Flush()
	h.pumpEvents(w, flusher, r, stream)
}

// pumpEvents copies the stream to w until the stream or the request ends.
// It takes every event queued at once (up to sseBatch), writes them with one
// write, and flushes once the queue is drained: one system call for a burst,
// and no goroutine between the watch registry and the connection.
func (h *Handler) pumpEvents(w http.ResponseWriter, flusher http.Flusher, r *http.Request, stream server.EventStream) {
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	unflushed := false
	for {
		n, ended, err := writeEvents(w, stream)
		switch {
		case err != nil:
			return
		case ended:
			end, _ := json.Marshal(map[string]string{"reason": stream.Reason()})
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", end)
			flusher.Flush()
			return
		case n == sseBatch:
			unflushed = true
			continue // more may be queued: send them in this flush
		case n > 0 || unflushed:
			flusher.Flush()
			unflushed = false
		}
		select {
		case <-stream.Ready():
		case <-stream.Done():
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-r.Context().Done():
			return
		}
	}
}

// sseBatch is the most events pumpEvents takes from its stream at once.
const sseBatch = 32

// sseScratch is what writeEvents works in, pooled so that an idle stream
// holds none.
type sseScratch struct {
	taken [sseBatch]server.Delivery
	buf   []byte
}

var sseScratches = sync.Pool{New: func() any { return &sseScratch{buf: make([]byte, 0, 1024)} }}

// maxPooledSSE is the largest buffer put back in sseScratches.
const maxPooledSSE = 64 << 10

// writeEvents takes the events queued in stream and writes them to w, one
// "data:" line each, with one Write; it returns how many it took and
// whether the stream has ended.
func writeEvents(w io.Writer, stream server.EventStream) (int, bool, error) {
	scratch := sseScratches.Get().(*sseScratch)
	defer func() {
		if cap(scratch.buf) <= maxPooledSSE {
			sseScratches.Put(scratch)
		}
	}()
	n, ended := stream.Take(scratch.taken[:])
	if n == 0 {
		return 0, ended, nil
	}
	buf := scratch.buf[:0]
	for _, d := range scratch.taken[:n] {
		buf = append(buf, "data: "...)
		buf = d.AppendJSON(buf)
		buf = append(buf, "\n\n"...)
	}
	clear(scratch.taken[:n]) // the pool keeps no event alive
	scratch.buf = buf
	_, err := w.Write(buf)
	return n, false, err
}
