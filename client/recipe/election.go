package recipe

import (
	"context"
	"errors"
	"fmt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// LeaderInfo describes a role's leader. The zero LeaderInfo (FencingToken
// 0) means the role has no candidate.
type LeaderInfo struct {
	// SessionHandle is the leader session's public handle (compare it with
	// client.Session.Handle), never its id.
	SessionHandle string `json:"session_handle"`
	Value         string `json:"value"`
	FencingToken  uint64 `json:"fencing_token"`
	// Index is the index of the read that saw it.
	Index uint64 `json:"index"`
}

// Election is a Session's candidacy for role.
type Election struct {
	session *client.Session
	role    string

	// tenure is the current or last leadership.
	tenure tenure
}

// NewElection returns the election of role (one path segment) for session
// s. It does not contact the cluster.
func NewElection(s *client.Session, role string) *Election {
	return &Election{session: s, role: role}
}

// Role returns the election's role.
func (e *Election) Role() string { return e.role }

// dir is the directory of the role's candidate nodes.
func (e *Election) dir() string { return "/elections/" + e.role }

// Campaign joins the election with value (or keeps the candidacy the
// session has, its place and token, and gives it value) and blocks until this session leads, then
// returns its fencing token. A candidate that does not lead watches only the
// candidate just ahead of it and asks again when that one goes, so a
// leader's death wakes one candidate. A cluster that is unavailable for a
// while (the client gave up its attempts during an election, say) does not
// end the campaign: it asks again after retryPause, as joining is
// idempotent for the session. When ctx ends first, Campaign withdraws the
// candidacy before returning ctx's error; when the session ends, it returns
// the session's error.
func (e *Election) Campaign(ctx context.Context, value string) (uint64, error) {
	for {
		candidacy, err := e.session.JoinElection(ctx, e.role, value)
		if err == nil && candidacy.IsLeader {
			return e.lead(candidacy), nil
		}
		if err == nil {
			err = e.waitForPredecessor(ctx, candidacy)
		}
		if err != nil && !(transient(err) && pause(ctx, e.session, retryPause)) {
			return 0, e.campaignFailed(ctx, err)
		}
	}
}

// waitForPredecessor returns when the candidate just ahead has gone (or
// changed), or with an error when ctx or the session ends.
func (e *Election) waitForPredecessor(ctx context.Context, candidacy *api.Candidacy) error {
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := e.session.Watch(watchCtx, candidacy.Watching, client.KnownIndex(candidacy.Index), client.WatchJitter(0))
	if err != nil {
		return err
	}
	select {
	case <-w.Events():
		return w.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// campaignFailed withdraws the candidacy when ctx ended and returns err
// with context.
func (e *Election) campaignFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		resignCtx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = e.Resign(resignCtx)
		err = ctx.Err()
	}
	return fmt.Errorf("recipe: campaign for %s: %w", e.role, err)
}

// lead records the leadership and returns its token.
func (e *Election) lead(candidacy *api.Candidacy) uint64 {
	return e.tenure.grant(e.session, candidacy.FencingToken, "", candidacy.Index)
}

// Resign withdraws the candidacy (and the leadership, if held). A session
// that is not a candidate is not an error.
func (e *Election) Resign(ctx context.Context) error {
	_, err := e.session.ResignElection(ctx, e.role)
	if err != nil && !gone(err) {
		return fmt.Errorf("recipe: resign %s: %w", e.role, err)
	}
	e.tenure.end(ErrReleased)
	return nil
}

// Token returns the fencing token of the current leadership, 0 when this
// session does not lead (as far as it knows).
func (e *Election) Token() uint64 {
	return e.tenure.token()
}

// Lost returns a channel closed when the current leadership ends: the
// session ended or Resign. Not leading, it returns a closed channel.
func (e *Election) Lost() <-chan struct{} {
	return e.tenure.lost()
}

// Leader reads the role's current leader; ErrNoLeader when it has no
// candidate.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	state, err := e.state(ctx)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("recipe: leader of %s: %w", e.role, err)
	}
	if state.Leader == nil {
		return LeaderInfo{Index: state.Index}, ErrNoLeader
	}
	return leaderInfo(state), nil
}

// state reads the role's election state. A role nobody ever joined (404)
// is a state without a leader, at index 0 (unknown).
func (e *Election) state(ctx context.Context) (*api.ElectionState, error) {
	state, err := e.session.Client().ElectionState(ctx, e.role)
	if err != nil && api.CodeOf(err) == api.CodeNotFound {
		return &api.ElectionState{}, nil
	}
	return state, err
}

func leaderInfo(state *api.ElectionState) LeaderInfo {
	if state.Leader == nil {
		return LeaderInfo{Index: state.Index}
	}
	return LeaderInfo{SessionHandle: state.Leader.SessionHandle, Value: state.Leader.Value,
		FencingToken: state.Leader.FencingToken, Index: state.Index}
}

// Observe returns a channel of the role's leaders, first the current one,
// then each change, in order: fencing tokens only grow, a leader that
// joins again with a new value is reported again with it, and a zero
// LeaderInfo marks a moment without candidates. It watches the role's
// candidates (one persistent watch over the session's stream) and re-reads
// the leader after each notification, which the client delays by its
// notify jitter so that a fleet of observers does not re-read at once;
// leaders whose whole tenure falls between two reads are coalesced, the
// way a watch coalesces rapid changes. The channel is closed when ctx or
// the session ends.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	go e.observe(ctx, out)
	return out
}

func (e *Election) observe(ctx context.Context, out chan<- LeaderInfo) {
	defer close(out)
	last, emitted := LeaderInfo{}, false
	emit := func(info LeaderInfo) bool {
		changed := !emitted || info.FencingToken > last.FencingToken || (info.FencingToken == 0 && last.FencingToken != 0) ||
			(info.FencingToken == last.FencingToken && info.Value != last.Value) // the leader joined again with a new value
		if !changed {
			return true
		}
		select {
		case out <- info:
			last, emitted = info, true
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		state, err := e.state(ctx)
		if err != nil {
			if !pause(ctx, e.session, retryPause) {
				return
			}
			continue
		}
		if !emit(leaderInfo(state)) {
			return
		}
		opts := []client.WatchOption{client.WatchRecursive(), client.Persistent()}
		if state.Index != 0 {
			opts = append(opts, client.KnownIndex(state.Index))
		}
		w, err := e.session.Watch(ctx, e.dir(), opts...)
		if err != nil {
			if client.IsSessionGone(err) || errors.Is(err, client.ErrSessionClosed) || !pause(ctx, e.session, retryPause) {
				return
			}
			continue
		}
		if state.Index == 0 {
			// The role did not exist when read, so the watch has no index
			// to catch up from: read again now that it is registered.
			again, err := e.state(ctx)
			if err != nil || !emit(leaderInfo(again)) {
				w.Close()
				if err == nil || !pause(ctx, e.session, retryPause) {
					return
				}
				continue
			}
		}
		if !e.follow(ctx, w, emit) {
			return
		}
	}
}

// follow re-reads the leader after each notification of w until w ends
// (false: stop observing) or a read fails (true: start over).
func (e *Election) follow(ctx context.Context, w *client.Watcher, emit func(LeaderInfo) bool) bool {
	defer w.Close()
	for range w.Events() {
		state, err := e.state(ctx)
		if err != nil {
			return ctx.Err() == nil
		}
		if !emit(leaderInfo(state)) {
			return false
		}
	}
	return ctx.Err() == nil && e.sessionAlive()
}

func (e *Election) sessionAlive() bool {
	select {
	case <-e.session.Done():
		return false
	default:
		return true
	}
}
