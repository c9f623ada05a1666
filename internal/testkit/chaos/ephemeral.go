package chaos

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
	mu   sync.Mutex // guards dead
	dead []string   // ephemeral paths whose session was abandoned
}

const sessionClients = 2

func (w *sessions) start(r *run) {
	for c := range sessionClients {
		r.wg.Add(1)
		go w.client(r, c)
	}
}

func (w *sessions) client(r *run, worker int) {
	defer r.wg.Done()
	for round := 0; !r.stopped(); round++ {
		s := newSession(r, sessionTimeout)
		if s == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		path := fmt.Sprintf("/eph/c%d-r%d", worker, round)
		ctx, cancel := requestContext()
		err := callKV(ctx, http.MethodPut, r.node(), path, url.Values{"ephemeral": {"true"}, "session_id": {s.id}, "request_seq": {"1"}}, &api.PutRequest{Value: s.id}, nil)
		cancel()
		if err == nil {
			w.watch(r, s, path)
		}
		s.stop()
		w.mu.Lock()
		w.dead = append(w.dead, path)
		w.mu.Unlock()
	}
}

// watch checks path for a while: a linearizable read that does not find
// it, followed by a session-scoped write that succeeds, is an early deletion.
func (w *sessions) watch(r *run, s *session, path string) {
	for checks := 3 + r.intn(10); checks > 0 && !r.stopped() && !s.expired(); checks-- {
		time.Sleep(200 * time.Millisecond)
		ctx, cancel := requestContext()
		err := callKV(ctx, http.MethodGet, r.node(), path, nil, nil, nil)
		cancel()
		if code(err) != api.CodeNotFound {
			continue
		}
		// A heartbeat's "alive" may come from a lagging member's local
		// state; a session-scoped write goes through the log, so its
		// success proves the session alive after the read missed the node.
		ctx, cancel = requestContext()
		probe := path + "-probe"
		err = callKV(ctx, http.MethodPut, r.node(), probe, url.Values{"ephemeral": {"true"}, "session_id": {s.id}, "request_seq": {"2"}}, &api.PutRequest{Value: s.id}, nil)
		cancel()
		if err == nil {
			r.anomaly("S: ephemeral %s gone while session %s still alive (a later session write succeeded)", path, s.id)
			r.update(func(report *Report) { report.Early++ })
		}
		w.mu.Lock()
		w.dead = append(w.dead, probe) // whatever the outcome, it must be gone at the end
		w.mu.Unlock()
		return
	}
}

func (w *sessions) check(r *run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Every abandoned session has missed its heartbeats; wait for expiry.
	deadline := time.Now().Add(4*sessionTimeout + 10*time.Second)
	for _, path := range w.dead {
		r.report.Operations++
		for i, m := range r.cluster.Members {
			for {
				ctx, cancel := requestContext()
				err := callKV(ctx, http.MethodGet, m.ClientURL, path, url.Values{"consistency": {api.Stale}}, nil, nil)
				cancel()
				if code(err) == api.CodeNotFound {
					break
				}
				if time.Now().After(deadline) {
					r.report.Leaked++
					r.anomaly("S: ephemeral %s of a dead session still on %s (member %d): %v", path, m.Name, i, err)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	r.logf("chaos S: %d sessions died owning an ephemeral node; none left on any member", len(w.dead))
	return nil
}
