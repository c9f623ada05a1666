package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// Lock is a distributed lock named name, held by a Session.
type Lock struct {
	session *client.Session
	name    string

	// tenure is the current or last holding of the lock.
	tenure tenure
}

// NewLock returns the lock name (one path segment) for session s. It does
// not contact the cluster.
func NewLock(s *client.Session, name string) *Lock {
	return &Lock{session: s, name: name}
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// releaseTimeout bounds giving up a place after the caller's context ended.
const releaseTimeout = 5 * time.Second

// Acquire blocks until the lock is held, and returns its fencing token, or
// until ctx ends. It asks the server to wait (wait_ms up to ctx's deadline,
// or client.MaxLockWait, the place kept between calls); only the
// predecessor's deletion wakes it. When ctx ends first, Acquire gives up its
// place in the queue before returning ctx's error (see giveUpPlace). A
// cluster that is unavailable for a while does not end the wait: it asks
// again (transient). Holding already, it returns the same token.
func (l *Lock) Acquire(ctx context.Context) (uint64, error) {
	for {
		call := l.startAcquire(ctx)
		select {
		case <-call.done:
		case <-ctx.Done():
			l.giveUpPlace(call)
			return 0, fmt.Errorf("recipe: acquire lock %s: %w", l.name, ctx.Err())
		}
		call.stop()
		if call.err == nil {
			return l.held(call.reply), nil
		}
		if api.CodeOf(call.err) == api.CodeLockNotHeld && ctx.Err() == nil {
			continue
		}
		if transient(call.err) && pause(ctx, l.session, retryPause) {
			continue // the cluster could not answer for now: ask again (transient)
		}
		if ctx.Err() != nil {
			l.giveUpPlace(call)
			return 0, fmt.Errorf("recipe: acquire lock %s: %w", l.name, ctx.Err())
		}
		return 0, fmt.Errorf("recipe: acquire lock %s: %w", l.name, call.err)
	}
}

// acquireCall is one AcquireLock call of Acquire. It runs detached from
// Acquire's context, so that giving up can wait for it to end: a call the
// client stops waiting for may still reach the server and make a place in
// the queue after the release that gave the place up.
type acquireCall struct {
	done  chan struct{} // closed when the call returned
	stop  context.CancelFunc
	reply *api.Lock // set before done is closed
	err   error     // set before done is closed
}

// startAcquire starts one acquire call, its wait_ms taken from ctx.
func (l *Lock) startAcquire(ctx context.Context) *acquireCall {
	callCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	call := &acquireCall{done: make(chan struct{}), stop: stop}
	wait := waitBudget(ctx)
	go func() {
		defer close(call.done)
		call.reply, call.err = l.session.AcquireLock(callCtx, l.name, wait)
	}()
	return call
}

// TryAcquire makes one attempt that lets the server wait up to wait. Not
// held, it returns an *api.Error with api.CodeLockNotHeld and keeps the
// place in the queue (Release gives it up).
func (l *Lock) TryAcquire(ctx context.Context, wait time.Duration) (uint64, error) {
	reply, err := l.session.AcquireLock(ctx, l.name, wait)
	if err != nil {
		return 0, fmt.Errorf("recipe: acquire lock %s: %w", l.name, err)
	}
	return l.held(reply), nil
}

// held records a granted acquire and returns its token.
func (l *Lock) held(reply *api.Lock) uint64 {
	return l.tenure.grant(l.session, reply.FencingToken, reply.Path, reply.Index)
}

// waitBudget returns the wait_ms for one acquire call: most of what is left
// of ctx's deadline (so the reply comes back before it), capped by
// client.MaxLockWait.
func waitBudget(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return client.MaxLockWait
	}
	left := time.Until(deadline)
	return min(max(left-min(left/4, 250*time.Millisecond), 0), client.MaxLockWait)
}

// Pauses between the releases of giveUpPlace while the abandoned call
// goes on.
const (
	firstGiveUpPause = 5 * time.Millisecond
	maxGiveUpPause   = 500 * time.Millisecond
)

// giveUpPlace releases whatever place the session has in the queue after an
// acquire that gave up; a place that does not exist is fine. The acquire
// call may still be on its way or waiting at the server, and the server may
// make its place after a release: so it releases, then releases again each
// time a pause passes while the call goes on (a release of the place the
// call waits on ends the call: the server answers lock_not_held), and once
// more after the call ended, until releaseTimeout. Only then is the call
// stopped; whatever the server does with it after that is not covered.
func (l *Lock) giveUpPlace(call *acquireCall) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	defer l.tenure.end(ErrReleased)
	defer call.stop()
	for pause := firstGiveUpPause; ; pause = min(2*pause, maxGiveUpPause) {
		_, _ = l.session.ReleaseLock(ctx, l.name, 0)
		timer := time.NewTimer(pause)
		select {
		case <-call.done:
			timer.Stop()
			_, _ = l.session.ReleaseLock(ctx, l.name, 0) // the place the call made after the release before
			return
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// Release gives the lock (or the place in its queue) up. It reports
// ErrNotHeld when the lock was not acquired, and an error wrapping ErrLost
// when the server no longer had it (the session ended or the node was
// deleted): whatever was done under it since may have overlapped another
// holder, and only fencing tokens tell.
func (l *Lock) Release(ctx context.Context) error {
	h := l.tenure.last()
	if h == nil || errors.Is(h.Err(), ErrReleased) {
		return ErrNotHeld
	}
	_, err := l.session.ReleaseLock(ctx, l.name, h.token)
	switch {
	case err == nil:
		l.tenure.end(ErrReleased)
		return nil
	case gone(err):
		l.tenure.end(fmt.Errorf("%w: %w", ErrLost, err))
		return fmt.Errorf("recipe: release lock %s (token %d): %w: %w", l.name, h.token, ErrLost, err)
	}
	return fmt.Errorf("recipe: release lock %s (token %d): %w", l.name, h.token, err)
}

// Token returns the fencing token of the current tenure, 0 when not held.
// Send it with every write to what the lock protects.
func (l *Lock) Token() uint64 {
	return l.tenure.token()
}

// Lost returns a channel closed when the current tenure ends: the session
// ended, the lock's node was deleted, or Release. Err then says which. Not
// holding, it returns a closed channel.
func (l *Lock) Lost() <-chan struct{} {
	h := l.tenure.last()
	if h == nil {
		return closedChannel
	}
	h.watchNode()
	return h.lost
}

// Err returns why the last tenure ended (an error wrapping ErrLost, or
// ErrReleased), or nil while it lasts or when there was none.
func (l *Lock) Err() error {
	if h := l.tenure.last(); h != nil {
		return h.Err()
	}
	return nil
}
