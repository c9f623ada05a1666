package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"time"

	"github.com/latch-io/latch/api"
)

// MaxLockWait is the longest wait_ms one AcquireLock asks the server for;
// a caller that wants to wait longer calls again (its place is kept).
const MaxLockWait = time.Minute

// AcquireLock queues session s on lock name, or keeps the place it already
// has, and lets the server wait up to wait for the lock to be its. Held, the
// reply carries the fencing token. Not held in time, the error is an
// *api.Error with api.CodeLockNotHeld and the reply (Held false) says the
// place in the queue: s keeps that place until ReleaseLock or its end.
// If s itself gives its place up while the call waits (ReleaseLock from
// another goroutine), the call ends with api.CodeLockNotHeld too, without a
// place. The call is idempotent per session, so it is retried through
// failover.
func (s *Session) AcquireLock(ctx context.Context, name string, wait time.Duration) (*api.Lock, error) {
	wait = min(max(wait, 0), MaxLockWait)
	body, err := json.Marshal(api.LockRequest{Name: name, SessionID: s.id, WaitMs: uint64(wait.Milliseconds())})
	if err != nil {
		return nil, err
	}
	var reply api.Lock
	cl := &call{method: "POST", path: "/v1/lock/acquire", body: body, policy: retrySafe,
		out: &reply, errOut: &reply, wait: wait}
	err = s.client.do(ctx, cl)
	s.noteWriteError(err)
	if err != nil {
		if api.CodeOf(err) == api.CodeLockNotHeld {
			reply.Held = false
			if reply.Index > 0 {
				// The 409 of an acquire that gave up waiting: the
				// session's queue node is in the log of reply.Shard.
				s.client.observeShardIndex(reply.Shard, reply.Index)
			}
			return &reply, err
		}
		return nil, err
	}
	return &reply, nil
}

// ReleaseLock gives up session s's place in lock name: the one created at
// token, or whichever it has when token is 0. A session without a place
// gets an *api.Error with api.CodeLockNotHeld.
func (s *Session) ReleaseLock(ctx context.Context, name string, token uint64) (*api.Released, error) {
	return sessionPostSafe[api.Released](ctx, s, "/v1/lock/release", api.LockRequest{Name: name, SessionID: s.id, FencingToken: token})
}

// LockState reads lock name's holder (nil when nobody holds it) and the
// number of waiters. The holder is named by its session handle: it is this
// client's session when Holder.SessionHandle equals Session.Handle. A lock nobody ever queued for is an *api.Error with
// api.CodeNotFound.
func (c *Client) LockState(ctx context.Context, name string) (*api.LockState, error) {
	var reply api.LockState
	cl := &call{method: "GET", path: "/v1/lock/" + url.PathEscape(name), out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &reply, nil
}

// JoinElection enters session s as a candidate for role with value, or
// returns the candidacy it already has, its place and fencing token kept and
// its value replaced by value (a leader announces a new value this way). It
// does not wait: a candidate that does not lead watches Watching, the path of the
// candidate just ahead of it.
func (s *Session) JoinElection(ctx context.Context, role, value string) (*api.Candidacy, error) {
	return sessionPostSafe[api.Candidacy](ctx, s, "/v1/election/join", api.ElectionRequest{Role: role, SessionID: s.id, Value: value})
}

// ResignElection withdraws session s's candidacy for role. A session that
// is not a candidate gets an *api.Error with api.CodeNotFound.
func (s *Session) ResignElection(ctx context.Context, role string) (*api.Resigned, error) {
	return sessionPostSafe[api.Resigned](ctx, s, "/v1/election/resign", api.ElectionRequest{Role: role, SessionID: s.id})
}

// ElectionState reads role's leader (nil when there is none) and the number
// of candidates. A role nobody ever joined is an *api.Error with
// api.CodeNotFound.
func (c *Client) ElectionState(ctx context.Context, role string) (*api.ElectionState, error) {
	var reply api.ElectionState
	cl := &call{method: "GET", path: "/v1/election/" + url.PathEscape(role), out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &reply, nil
}

// IsSessionGone reports whether err says a session no longer exists.
func IsSessionGone(err error) bool {
	return errors.Is(err, &api.Error{Code: api.CodeSessionExpired})
}
