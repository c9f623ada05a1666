package faulthttp

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
)

// Request is one request a Proxy received, faulted or forwarded.
type Request struct {
	Method string
	Path   string // URL path, unescaped
	Query  url.Values
	Body   []byte
	Time   time.Time // when it arrived
	// Status is the reply's status, set before the client can read the
	// reply; 0 while unanswered (or for a dropped or hung request).
	Status int
	// Reply is the body of a forwarded JSON reply (not of event streams).
	Reply []byte
}

// Requests returns the requests the proxy received, oldest first.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.requests))
	for i, r := range p.requests {
		out[i] = *r
	}
	return out
}

// Count returns how many requests the proxy received with method ("" for
// any) on path (exact, or a prefix when it ends in "*"; "" for any).
func (p *Proxy) Count(method, path string) int {
	n := 0
	for _, r := range p.Requests() {
		if (method == "" || r.Method == method) && pathMatches(path, r.Path) {
			n++
		}
	}
	return n
}

func pathMatches(pattern, path string) bool {
	switch {
	case pattern == "":
		return true
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(path, strings.TrimSuffix(pattern, "*"))
	default:
		return path == pattern
	}
}

// answered notes the status of rec's reply and counts a heartbeat the
// member accepted for each session it named.
func (p *Proxy) answered(rec *Request, status int) {
	var beat api.SessionRequest
	isBeat := status == http.StatusOK && rec.Method == http.MethodPost && rec.Path == "/v1/session/heartbeat" &&
		json.Unmarshal(rec.Body, &beat) == nil
	p.mu.Lock()
	defer p.mu.Unlock()
	rec.Status = status
	if !isBeat {
		return
	}
	if beat.SessionID != "" {
		p.beats[beat.SessionID]++
	}
	for _, id := range beat.SessionIDs {
		p.beats[id]++
	}
}

// Heartbeats returns how many heartbeats for session id the proxy saw the
// member answer 200 (single or batched form).
func (p *Proxy) Heartbeats(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beats[id]
}
