package faulthttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
)

// Kind is what a fault does to a request it matches.
type Kind int

const (
	// Reply answers with the fault's Err envelope (its code's status) without
	// forwarding the request: the member never sees it.
	Reply Kind = iota
	// LoseReply forwards the request and answers 503 unavailable whatever
	// the member replied: the outcome is unknown to the client, as when a
	// reply is lost in a failover.
	LoseReply
	// Delay waits Delay (or until the client gives up) and then forwards.
	Delay
	// Drop closes the connection without answering; the member never sees
	// the request.
	Drop
	// ForwardThenDrop forwards the request and then closes the connection
	// without answering: the member acted on it, the client sees the
	// connection fail mid-request.
	ForwardThenDrop
	// Hang waits until the client gives up and answers nothing.
	Hang
	// Late holds the request until the fault's Gate is closed, whether or
	// not the client gives up meanwhile, and then forwards it detached from
	// the client: a request held up on its way reaches the member after its
	// client stopped waiting. The member's reply reaches the client if it
	// still waits.
	Late
)

// Fault is one rule of a Proxy.
type Fault struct {
	Method string // "" matches any method; "PUT DELETE" matches either
	// Path matches the URL path exactly, or as a prefix when it ends in "*";
	// "" matches any path.
	Path string
	// Times is how many matching requests the fault applies to; 0 or less
	// means every one until Clear.
	Times int
	Kind  Kind
	Err   api.Error       // for Reply
	Delay time.Duration   // for Delay
	Gate  <-chan struct{} // for Late
}

func (f *Fault) matches(r *http.Request) bool {
	if f.Method != "" && !slices.Contains(strings.Fields(f.Method), r.Method) {
		return false
	}
	return pathMatches(f.Path, r.URL.Path)
}

// apply carries out f on r; it reports whether it answered r (false: the
// request is to be forwarded as usual).
func (f *Fault) apply(p *Proxy, w *recorder, r *http.Request) bool {
	switch f.Kind {
	case Reply:
		writeError(w, &f.Err)
	case LoseReply:
		p.rp.ServeHTTP(&discard{header: http.Header{}}, r.WithContext(context.WithoutCancel(r.Context())))
		writeError(w, api.Errorf(api.CodeUnavailable, "faulthttp: reply lost (the request reached %s)", p.name))
	case Delay:
		select {
		case <-time.After(f.Delay):
			return false
		case <-r.Context().Done():
		}
	case Drop:
		hangUp(w)
	case ForwardThenDrop:
		p.rp.ServeHTTP(&discard{header: http.Header{}}, r.WithContext(context.WithoutCancel(r.Context())))
		hangUp(w)
	case Hang:
		<-r.Context().Done()
	case Late:
		<-f.Gate
		p.rp.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	}
	return true
}

// Inject adds f after the proxy's other faults: a request meets the first
// fault that matches it.
func (p *Proxy) Inject(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, &f)
}

// Clear removes every fault.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

// FailNext answers the next n requests (any route) with code and, when not
// empty, the leader hint, without forwarding them.
func (p *Proxy) FailNext(n int, code api.Code, leaderHint string) {
	p.Inject(Fault{Times: n, Kind: Reply,
		Err: api.Error{Code: code, Message: "faulthttp: injected " + string(code), LeaderHint: leaderHint}})
}

// LoseNextReplies forwards the next n node writes (PUT, DELETE) and
// answers each 503: they are applied, the client cannot know it.
func (p *Proxy) LoseNextReplies(n int) {
	p.Inject(Fault{Method: "PUT DELETE", Path: "/v1/kv/*", Times: n, Kind: LoseReply})
}

// RefuseWatches answers the next n watch registrations with the 409
// precondition_failed the member gives a session whose event stream is not
// open there, as when the member ended the stream just before.
func (p *Proxy) RefuseWatches(n int) {
	p.Inject(Fault{Method: http.MethodPost, Path: "/v1/watch", Times: n, Kind: Reply, Err: api.Error{
		Code:    api.CodePreconditionFailed,
		Message: fmt.Sprintf("faulthttp: the session has no event stream open on member %s (injected)", p.name)}})
}

// SetHang makes every request hang until its client gives up, while on.
func (p *Proxy) SetHang(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.faults[:0]
	for _, f := range p.faults {
		if !(f.Kind == Hang && f.Times <= 0 && f.Method == "" && f.Path == "") {
			kept = append(kept, f)
		}
	}
	p.faults = kept
	if on {
		p.faults = append([]*Fault{{Kind: Hang}}, p.faults...)
	}
}

// hangUp closes the client's connection without a reply.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// writeError writes e as latch's error envelope with its code's status.
func writeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: *e})
}

// discard is a ResponseWriter that drops the member's reply of a LoseReply.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
