package client

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
)

// endpointPool chooses the server a request goes to. It prefers the current
// endpoint while it is healthy, skips endpoints that failed within the last
// downTime, and adopts leader hints (adding them if they are new).
type endpointPool struct {
	downTime time.Duration
	now      func() time.Time

	mu sync.Mutex // guards the fields below
	// urls are normalized base URLs without a trailing '/'. Hints may append
	// to it; it never shrinks. Invariant: 0 <= current < len(urls).
	urls      []string
	downUntil []time.Time // per urls[i]: avoid until then
	current   int
}

func newEndpointPool(endpoints []string, start int, downTime time.Duration, now func() time.Time) (*endpointPool, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("client: no endpoints")
	}
	pool := &endpointPool{downTime: downTime, now: now}
	for _, e := range endpoints {
		u, err := normalizeEndpoint(e)
		if err != nil {
			return nil, err
		}
		if pool.indexLocked(u) < 0 {
			pool.urls = append(pool.urls, u)
			pool.downUntil = append(pool.downUntil, time.Time{})
		}
	}
	pool.current = start % len(pool.urls)
	return pool, nil
}

// normalizeEndpoint turns "host:port" or "http://host:port/" into
// "http://host:port".
func normalizeEndpoint(e string) (string, error) {
	e = strings.TrimSpace(e)
	if !strings.Contains(e, "://") {
		e = "http://" + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("client: bad endpoint %q: want http://host:port", e)
	}
	return u.Scheme + "://" + u.Host + strings.TrimRight(u.Path, "/"), nil
}

func (p *endpointPool) indexLocked(u string) int {
	for i, existing := range p.urls {
		if existing == u {
			return i
		}
	}
	return -1
}

// pick returns the endpoint the next request should use.
func (p *endpointPool) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !now.Before(p.downUntil[p.current]) {
		return p.urls[p.current]
	}
	best := p.current
	for step := 1; step < len(p.urls); step++ {
		i := (p.current + step) % len(p.urls)
		if !now.Before(p.downUntil[i]) {
			best = i
			break
		}
		if p.downUntil[i].Before(p.downUntil[best]) {
			best = i
		}
	}
	p.current = best
	return p.urls[best]
}

// markDown records that u failed: it is avoided for downTime and, if it was
// the current endpoint, the next pick moves on.
func (p *endpointPool) markDown(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.indexLocked(u); i >= 0 {
		p.downUntil[i] = p.now().Add(p.downTime)
	}
}

// prefer makes hint the current endpoint, adding it if it is new. It
// reports whether hint was usable and differs from the endpoint it replaces.
func (p *endpointPool) prefer(hint string) bool {
	u, err := normalizeEndpoint(hint)
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.indexLocked(u)
	if i < 0 {
		p.urls = append(p.urls, u)
		p.downUntil = append(p.downUntil, time.Time{})
		i = len(p.urls) - 1
	}
	changed := i != p.current
	p.current = i
	p.downUntil[i] = time.Time{}
	return changed
}

// list returns a copy of the known endpoints.
func (p *endpointPool) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.urls...)
}
