package queues

import (
	"context"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
)

// The directories of the lock and election queues and their nodes' name
// prefixes.
const (
	LocksRoot       = "/locks"
	lockPrefix      = "lock-"
	ElectionsRoot   = "/elections"
	candidatePrefix = "candidate-"
)

// AcquireLock queues the session on lock name (or keeps its place) and waits
// up to wait to hold it. Held: the reply carries the fencing token, the raft
// index of the session's queue node. Not held in time is a result, not an
// error: Held is false, with the position (how many are ahead) and the queue
// node; the session keeps its place and may call again. The wire layer
// answers it as docs/api.md's 409 lock_not_held.
func (q *Queues) AcquireLock(ctx context.Context, name string, session uint64, wait time.Duration) (api.Lock, error) {
	dir, err := queueDir(lockQueue, name)
	if err != nil {
		return api.Lock{}, err
	}
	if session == 0 {
		return api.Lock{}, api.Errorf(api.CodeInvalidArgument, "session_id is required")
	}
	enqueueCtx := ctx
	if wait > 0 && q.placeBehind(dir, session) {
		// The place will not be at the front before another's release,
		// a write of its own: it may wait to share that write's WAL save.
		enqueueCtx = replica.Deferred(ctx, replica.PlaceDeferral)
	}
	mine, err := q.enqueue(enqueueCtx, dir, lockPrefix, session, nil)
	if err != nil {
		return api.Lock{}, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		members, _, index := q.queue(dir, lockQueue.prefix)
		ahead, predecessor, found := position(members, mine.Path)
		switch {
		case !found:
			return api.Lock{}, q.placeGone(session, name)
		case ahead == 0:
			return api.Lock{Held: true, SessionHandle: api.FormatSessionHandle(session),
				FencingToken: mine.CreatedIndex, Path: mine.Path, Index: index}, nil
		}
		// Woken by the deletion of the node ahead, or of our own (the
		// session ended: the next round answers session_expired).
		if !q.waitEitherDeleted(waitCtx, predecessor, mine.Path) {
			if ctx.Err() != nil {
				return api.Lock{}, q.cfg.Replica.Unavailable("request ended while waiting for lock %q", name)
			}
			return api.Lock{Held: false, SessionHandle: api.FormatSessionHandle(session), Position: ahead, Path: mine.Path, Index: index}, nil
		}
	}
}

// placeBehind reports whether, in this replica's state, the session has no
// place in the queue dir and another session has: a new place would be
// behind that one. (A session with a place keeps it: its acquire's write
// changes nothing, and it may be the holder's.)
func (q *Queues) placeBehind(dir string, session uint64) bool {
	members, _, _ := q.queue(dir, lockQueue.prefix)
	for _, m := range members {
		if m.owner == session {
			return false
		}
	}
	return len(members) > 0
}

// placeGone is the error of an acquire whose queue node is gone: 410 if its
// session ended (the session's end deleted it), else 409 lock_not_held, as
// the session itself gave the place up while the acquire waited (a release,
// or a DELETE of the node): a client that gives up an acquire whose call is
// still in flight releases the place that call may make, and must not take
// that for its session's end.
func (q *Queues) placeGone(session uint64, name string) error {
	if !q.sessionLive(session) {
		return api.Errorf(api.CodeSessionExpired, "the session's place in lock %q is gone (session ended)", name)
	}
	return api.Errorf(api.CodeLockNotHeld, "the session's place in lock %q was given up (released) while it waited", name)
}

// ReleaseLock deletes the session's queue node of lock name. With a non-zero
// token only the node created at that index is released. The node is looked
// up locally first: the delete is conditioned on its version, so a stale
// view can only make it fail, and then the lookup is repeated after a
// linearizable barrier.
func (q *Queues) ReleaseLock(ctx context.Context, name string, session, token uint64) (api.Released, error) {
	dir, err := queueDir(lockQueue, name)
	if err != nil {
		return api.Released{}, err
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := q.cfg.Replica.Barrier(ctx, api.Linearizable, 0); err != nil {
				return api.Released{}, err
			}
		}
		m, found := q.queuedBy(dir, lockQueue.prefix, session, token)
		if !found {
			if attempt > 0 {
				return api.Released{}, q.notQueued(session, api.Errorf(api.CodeLockNotHeld,
					"session %s holds no place in lock %q with token %d", api.FormatID(session), name, token))
			}
			continue
		}
		index, err := q.deleteOwned(ctx, m, session)
		if api.CodeOf(err) == api.CodePreconditionFailed && attempt == 0 {
			continue
		}
		if err != nil {
			return api.Released{}, err
		}
		return api.Released{Released: true, Index: index}, nil
	}
}

// queuedBy finds the session's node in the queue dir (with token, if not 0).
func (q *Queues) queuedBy(dir, prefix string, session, token uint64) (queueMember, bool) {
	members, _, _ := q.queue(dir, prefix)
	for _, m := range members {
		if m.owner == session && (token == 0 || m.token == token) {
			return m, true
		}
	}
	return queueMember{}, false
}

// deleteOwned deletes queue member m, only if it is still the same node.
func (q *Queues) deleteOwned(ctx context.Context, m queueMember, session uint64) (uint64, error) {
	cmd := &command.Command{
		Op: command.OpDelete, Path: m.path, SessionID: session,
		Precondition: command.PrecondVersion, Version: m.version,
	}
	res, index, err := q.cfg.Replica.Propose(ctx, cmd)
	if err != nil {
		return 0, err
	}
	if res.Err != nil {
		return 0, res.Err
	}
	return index, nil
}

// LockState reports a lock's holder and how many wait: not_found if the lock
// was never used (its directory does not exist), a null holder if nobody
// holds or waits for it now.
func (q *Queues) LockState(ctx context.Context, name string, consistency string, minIndex uint64) (api.LockState, error) {
	dir, err := queueDir(lockQueue, name)
	if err != nil {
		return api.LockState{}, err
	}
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return api.LockState{}, err
	}
	members, exists, index := q.queue(dir, lockQueue.prefix)
	if !exists {
		return api.LockState{}, notFound(lockQueue, name)
	}
	out := api.LockState{Index: index}
	if len(members) > 0 {
		m := members[0]
		// The holder's id is its bearer secret: a read shows its handle.
		out.Holder = &api.Holder{SessionHandle: api.FormatSessionHandle(m.owner), FencingToken: m.token, Path: m.path}
		out.Waiters = len(members) - 1
	}
	return out, nil
}

// JoinElection enters the session as a candidate for role, or returns its
// existing candidacy with its value replaced by value (the place in the
// queue, and so the fencing token, are kept). It does not wait: the client
// watches `watching`.
func (q *Queues) JoinElection(ctx context.Context, role string, session uint64, value []byte) (api.Candidacy, error) {
	dir, err := queueDir(electionQueue, role)
	if err != nil {
		return api.Candidacy{}, err
	}
	if session == 0 {
		return api.Candidacy{}, api.Errorf(api.CodeInvalidArgument, "session_id is required")
	}
	if len(value) > q.cfg.MaxValueSize {
		return api.Candidacy{}, api.Errorf(api.CodeTooLarge, "value is %d bytes, over the limit of %d", len(value), q.cfg.MaxValueSize)
	}
	mine, err := q.enqueue(ctx, dir, candidatePrefix, session, value)
	if err != nil {
		return api.Candidacy{}, err
	}
	members, _, index := q.queue(dir, electionQueue.prefix)
	ahead, predecessor, found := position(members, mine.Path)
	if !found {
		return api.Candidacy{}, api.Errorf(api.CodeSessionExpired, "the session's candidacy for %q is gone (session ended)", role)
	}
	out := api.Candidacy{IsLeader: ahead == 0, SessionHandle: api.FormatSessionHandle(session),
		FencingToken: mine.CreatedIndex, Index: index}
	if predecessor != "" {
		out.Watching = predecessor
	}
	return out, nil
}

// ResignElection withdraws the session's candidacy for role.
func (q *Queues) ResignElection(ctx context.Context, role string, session uint64) (api.Resigned, error) {
	dir, err := queueDir(electionQueue, role)
	if err != nil {
		return api.Resigned{}, err
	}
	if err := q.cfg.Replica.Barrier(ctx, api.Linearizable, 0); err != nil {
		return api.Resigned{}, err
	}
	members, _, _ := q.queue(dir, electionQueue.prefix)
	for _, m := range members {
		if m.owner == session {
			index, err := q.deleteOwned(ctx, m, session)
			if err != nil {
				return api.Resigned{}, err
			}
			return api.Resigned{Resigned: true, Index: index}, nil
		}
	}
	return api.Resigned{}, q.notQueued(session, api.Errorf(api.CodeNotFound, "session %s is not a candidate for %q", api.FormatID(session), role))
}

// notQueued is the error of a release or resign that found no place of
// session's: 410 if the session itself is gone (as every request naming a
// dead session answers), else notFound. The caller has read the queue after
// a linearizable barrier, so the state it reads here is as fresh.
func (q *Queues) notQueued(session uint64, notFound error) error {
	if !q.sessionLive(session) {
		return api.SessionGone(session)
	}
	return notFound
}

// sessionLive reports whether session is live in this replica's state.
func (q *Queues) sessionLive(session uint64) bool {
	var err error
	q.cfg.Replica.View(func(f *fsm.FSM) { _, err = f.Session(session) })
	return err == nil
}

// ElectionState reports the leader of role and how many candidates there
// are: not_found if the role was never joined (its directory does not
// exist), a null leader if it has no candidate now.
func (q *Queues) ElectionState(ctx context.Context, role string, consistency string, minIndex uint64) (api.ElectionState, error) {
	dir, err := queueDir(electionQueue, role)
	if err != nil {
		return api.ElectionState{}, err
	}
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return api.ElectionState{}, err
	}
	members, exists, index := q.queue(dir, electionQueue.prefix)
	if !exists {
		return api.ElectionState{}, notFound(electionQueue, role)
	}
	out := api.ElectionState{Index: index, Candidates: len(members)}
	if len(members) > 0 {
		m := members[0]
		// The leader's id is its bearer secret: a read shows its handle.
		out.Leader = &api.Leader{SessionHandle: api.FormatSessionHandle(m.owner), Value: string(m.value), FencingToken: m.token}
	}
	return out, nil
}

// notFound is the error of a state read of a lock or election whose
// directory does not exist.
func notFound(kind queueKind, name string) error {
	return api.Errorf(api.CodeNotFound, "%s %q not found", kind.what, name)
}
