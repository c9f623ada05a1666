package fencing

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/latch-io/latch/api"
)

// Middleware guards next with g. Each request must carry its fencing token in
// the Latch-Fencing-Token header (a decimal uint64): a missing or malformed
// one is answered 400, a stale one 409 (code precondition_failed, with the
// token and the highest accepted one in the message), a failing Guard 500.
// resourceOf names the resource a request writes (an empty name is a 400).
//
// Requests for one resource are serialized: Accept and next.ServeHTTP run as
// one step, so a stale holder can never pass the check and then land its
// write after a newer holder's. Requests for different resources run in
// parallel.
func Middleware(g Guard, resourceOf func(*http.Request) string, next http.Handler) http.Handler {
	locks := &keyedMutex{held: map[string]*keyedLock{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get(api.HeaderFencingToken)
		if raw == "" {
			writeError(w, api.Errorf(api.CodeInvalidArgument, "missing %s header", api.HeaderFencingToken))
			return
		}
		token, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			writeError(w, api.Errorf(api.CodeInvalidArgument, "bad %s header %q: want a decimal token", api.HeaderFencingToken, raw))
			return
		}
		resource := resourceOf(r)
		if resource == "" {
			writeError(w, api.Errorf(api.CodeInvalidArgument, "no fenced resource for %s %s", r.Method, r.URL.Path))
			return
		}
		unlock := locks.lock(resource)
		defer unlock()
		if err := g.Accept(resource, token); err != nil {
			if errors.Is(err, ErrStaleToken) {
				writeError(w, api.Errorf(api.CodePreconditionFailed, "%v; the lock has a newer holder, this write is refused", err))
				return
			}
			writeError(w, api.Errorf(api.CodeInternal, "%v", err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: *e})
}

// keyedMutex is one mutex per key, allocated while in use.
type keyedMutex struct {
	mu   sync.Mutex // guards held and every keyedLock's waiters
	held map[string]*keyedLock
}

type keyedLock struct {
	sync.Mutex     // held by the request working on the key
	waiters    int // requests holding or waiting for it
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	l := k.held[key]
	if l == nil {
		l = &keyedLock{}
		k.held[key] = l
	}
	l.waiters++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		l.waiters--
		if l.waiters == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}
