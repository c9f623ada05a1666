package faulthttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// stream is an event stream being copied through the proxy.
type stream struct {
	cancel context.CancelFunc

	mu     sync.Mutex // guards the fields below
	cut    bool
	reason string
}

// stream copies a session's event stream from the member, whole
// Server-Sent Events frames at a time, until either side ends it or
// CutStreams cuts it.
func (p *Proxy) stream(w *recorder, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &stream{cancel: cancel}
	p.mu.Lock()
	p.streams[st] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, st)
		p.mu.Unlock()
	}()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.backend.String()+r.URL.RequestURI(), nil)
	if err != nil {
		p.backendError(w, r, err)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		p.backendError(w, r, err)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Flush()
	st.copyFrames(w, resp.Body)
	if reason, cut := st.cutReason(); cut && reason != "" {
		end, _ := json.Marshal(map[string]string{"reason": reason})
		fmt.Fprintf(w, "event: end\ndata: %s\n\n", end)
		w.Flush()
	}
}

// copyFrames copies body to w up to the last whole frame ("\n\n") each
// read, so that a cut never leaves half a frame before the end frame, and
// stops at the cut: nothing read after it reaches the client.
func (s *stream) copyFrames(w *recorder, body io.Reader) {
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := body.Read(buf)
		pending = append(pending, buf[:n]...)
		if i := bytes.LastIndex(pending, []byte("\n\n")); i >= 0 {
			if !s.forward(w, pending[:i+2]) {
				return
			}
			pending = append(pending[:0], pending[i+2:]...)
		}
		if err != nil {
			return
		}
	}
}

// forward writes frames to w unless the stream was cut, and reports whether
// it did. CutStreams waits for a write under way.
func (s *stream) forward(w *recorder, frames []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return false
	}
	if _, err := w.Write(frames); err != nil {
		return false
	}
	w.Flush()
	return true
}

func (s *stream) cutReason() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason, s.cut
}

// CutStreams ends every event stream open through the proxy, as a member
// does to a slow consumer: with reason not empty, the client gets a last
// "event: end" frame carrying it; with "", the connection just ends. Once it
// returns no event reaches a client through a cut stream. The member sees
// its stream's client leave (and keeps the session's watches, as it does
// when a stream merely closes).
func (p *Proxy) CutStreams(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for st := range p.streams {
		st.mu.Lock()
		st.cut, st.reason = true, reason
		st.mu.Unlock()
		st.cancel()
	}
}

// OpenStreams returns how many event streams are open through the proxy.
func (p *Proxy) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}
