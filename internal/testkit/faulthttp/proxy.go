package faulthttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// maxRecorded bounds the request and reply bodies a Proxy keeps per request.
const maxRecorded = 1 << 20

// Proxy forwards one loopback port to one backend member, applying faults.
type Proxy struct {
	name    string
	addr    string
	backend *url.URL
	rp      *httputil.ReverseProxy
	client  *http.Client // for event streams, which the proxy copies itself

	mu       sync.Mutex // guards the fields below
	srv      *http.Server
	ln       net.Listener
	faults   []*Fault
	requests []*Request
	streams  map[*stream]struct{}
	beats    map[string]int    // heartbeats answered 200, per session id
	rewrite  *strings.Replacer // backend URLs to proxy URLs in JSON replies
}

// New starts a proxy named name on a fresh loopback port in front of the
// member whose base URL is backend. Stop it (or Close) when done.
func New(name, backend string) (*Proxy, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, fmt.Errorf("faulthttp: backend %q: %w", backend, err)
	}
	p := &Proxy{name: name, backend: u, streams: map[*stream]struct{}{}, beats: map[string]int{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.backendError,
		FlushInterval:  -1,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faulthttp: listen: %w", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

// Name returns the name the proxy was given (its member's name).
func (p *Proxy) Name() string { return p.name }

// URL returns the proxy's base URL, which clients use as the member's.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Backend returns the base URL of the member behind the proxy.
func (p *Proxy) Backend() string { return p.backend.String() }

func (p *Proxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(p.handle), ReadHeaderTimeout: 10 * time.Second}
	p.mu.Lock()
	p.srv, p.ln = srv, ln
	p.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop closes the proxy's listener and every connection through it: clients
// see refused connections (as from a member that is down) until Start. The
// member behind it keeps running.
func (p *Proxy) Stop() {
	p.mu.Lock()
	srv, ln := p.srv, p.ln
	p.srv, p.ln = nil, nil
	p.mu.Unlock()
	if srv != nil {
		_ = ln.Close() // at once, even if Serve has not taken it up yet
		_ = srv.Close()
	}
}

// Start listens again on the proxy's address after Stop.
func (p *Proxy) Start() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("faulthttp: relisten on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// setRewrite makes JSON replies name the proxies instead of the members
// behind them (leader hints, status, members).
func (p *Proxy) setRewrite(r *strings.Replacer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rewrite = r
}

// handle records r, applies the first fault it matches and forwards it.
func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	rec, err := p.record(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), recordKey{}, rec))
	rw := &recorder{ResponseWriter: w, p: p, rec: rec}
	f := p.take(r)
	if f != nil && f.apply(p, rw, r) {
		return
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events") {
		p.stream(rw, r)
		return
	}
	p.rp.ServeHTTP(rw, r)
}

// record logs r with its body, which it reads and puts back.
func (p *Proxy) record(r *http.Request) (*Request, error) {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, maxRecorded+1))
		if err != nil {
			return nil, fmt.Errorf("faulthttp: read request body: %w", err)
		}
		if len(body) > maxRecorded {
			return nil, fmt.Errorf("faulthttp: request body over %d bytes", maxRecorded)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := &Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Body: body, Time: time.Now()}
	p.mu.Lock()
	p.requests = append(p.requests, rec)
	p.mu.Unlock()
	return rec, nil
}

// take returns the first fault matching r and counts it down, or nil.
func (p *Proxy) take(r *http.Request) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if !f.matches(r) {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				p.faults = append(p.faults[:i:i], p.faults[i+1:]...)
			}
		}
		return f
	}
	return nil
}

// modifyResponse keeps small JSON replies for the log and names the proxies
// instead of the members in them.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.ContentLength > maxRecorded {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRecorded+1))
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("faulthttp: read reply: %w", err)
	}
	p.mu.Lock()
	rewrite := p.rewrite
	p.mu.Unlock()
	if rewrite != nil {
		body = []byte(rewrite.Replace(string(body)))
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	if rec, ok := resp.Request.Context().Value(recordKey{}).(*Request); ok {
		p.mu.Lock()
		rec.Reply = body
		p.mu.Unlock()
	}
	return nil
}

// backendError answers 502 when the member cannot be reached (it is down):
// as from a proxy, so a test sees that the request got this far.
func (p *Proxy) backendError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	http.Error(w, "faulthttp: backend: "+err.Error(), http.StatusBadGateway)
}

// recordKey carries the *Request of a forwarded request to modifyResponse.
type recordKey struct{}

// recorder notes the status of the reply in the request's record before the
// client can see it, so a test that got a reply finds it logged.
type recorder struct {
	http.ResponseWriter
	p       *Proxy
	rec     *Request
	written bool
}

func (w *recorder) WriteHeader(code int) {
	if !w.written {
		w.written = true
		w.p.answered(w.rec, code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (for Drop).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
