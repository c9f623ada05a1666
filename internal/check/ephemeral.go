package check

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// sessions is workload S: clients create a session and an ephemeral node,
// check it now and then, and at some point die (stop heartbeating, as a
// killed or frozen client). A node must not vanish while a later write
// under its session still succeeds; no node of a dead session may remain.
type sessions struct {
	mu      sync.Mutex    // guards the fields below
	dead    []string      // ephemeral paths whose session was abandoned
	longest time.Duration // the longest session timeout granted
}

const sessionClients = 2

func (w *sessions) Start(r *Run) {
	for c := range sessionClients {
		r.Workers.Add(1)
		go w.client(r, c)
	}
}

func (w *sessions) client(r *Run, worker int) {
	defer r.Workers.Done()
	for round := 0; !r.Stopped(); round++ {
		s := NewSession(r, SessionTimeout)
		if s == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		path := r.Key(fmt.Sprintf("/eph/c%d-r%d", worker, round))
		ctx, cancel := RequestContext()
		err := r.CallKV(ctx, http.MethodPut, r.Node(), path, url.Values{"ephemeral": {"true"}, "session_id": {s.ID}, "request_seq": {"1"}}, &api.PutRequest{Value: s.ID}, nil)
		cancel()
		if err == nil {
			w.watch(r, s, path)
		}
		s.Stop()
		w.mu.Lock()
		w.dead = append(w.dead, path)
		w.longest = max(w.longest, s.Timeout())
		w.mu.Unlock()
	}
}

// watch checks path for a while: a linearizable read that does not find
// it, followed by a session-scoped write that succeeds, is an early deletion.
func (w *sessions) watch(r *Run, s *Session, path string) {
	for checks := 3 + r.Intn(10); checks > 0 && !r.Stopped() && !s.Expired(); checks-- {
		time.Sleep(200 * time.Millisecond)
		ctx, cancel := RequestContext()
		err := r.CallKV(ctx, http.MethodGet, r.Node(), path, nil, nil, nil)
		cancel()
		if Code(err) != api.CodeNotFound {
			continue
		}
		// A heartbeat's "alive" may come from a lagging member's local
		// state; a session-scoped write goes through the log, so its
		// success proves the session alive after the read missed the node.
		ctx, cancel = RequestContext()
		probe := path + "-probe"
		err = r.CallKV(ctx, http.MethodPut, r.Node(), probe, url.Values{"ephemeral": {"true"}, "session_id": {s.ID}, "request_seq": {"2"}}, &api.PutRequest{Value: s.ID}, nil)
		cancel()
		if err == nil {
			r.Anomaly("S: ephemeral %s gone while session %s still alive (a later session write succeeded)", path, s.ID)
			r.Update(func(report *Report) { report.Early++ })
		}
		w.mu.Lock()
		w.dead = append(w.dead, probe) // whatever the outcome, it must be gone at the end
		w.mu.Unlock()
		return
	}
}

func (w *sessions) Check(r *Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Every abandoned session has missed its heartbeats; wait for expiry.
	deadline := time.Now().Add(4*max(SessionTimeout, w.longest) + 10*time.Second)
	for _, path := range w.dead {
		r.Report.Operations++
		for i, m := range r.Members() {
			for {
				ctx, cancel := RequestContext()
				err := r.CallKV(ctx, http.MethodGet, m.ClientURL, path, url.Values{"consistency": {api.Stale}}, nil, nil)
				cancel()
				if Code(err) == api.CodeNotFound {
					break
				}
				if time.Now().After(deadline) {
					r.Report.Leaked++
					r.Anomaly("S: ephemeral %s of a dead session still on %s (member %d): %v", path, m.Name, i, err)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	r.Logf("check S: %d sessions died owning an ephemeral node; none left on any member", len(w.dead))
	return nil
}
