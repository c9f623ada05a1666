package fsm

import "github.com/latch-io/latch/internal/command"

// The auth state as it was at a past index, for the watch registry: a
// watch delivers an event only if its user could read the event's path at
// the event's index, so that a revoked grant, a deleted user or a revoked
// token stops a running watch at the very index of the change, whatever
// the batching of applied entries.

// maxPastAuth bounds the auth states kept: more auth changes than this in
// one batch of applied entries would make the oldest events of the batch
// judged by a later state (a refusal at most one batch early).
const maxPastAuth = 16

// pastAuthState is an auth state in effect for the indexes below until
// (and at or above the until of the state before it).
type pastAuthState struct {
	until uint64
	state authState
}

// rememberAuth keeps the auth state in effect before the auth change at
// index. The copy is O(1): the trees are copied on write.
func (f *FSM) rememberAuth(index uint64) {
	if len(f.pastAuth) == maxPastAuth {
		f.pastAuth = append(f.pastAuth[:0], f.pastAuth[1:]...)
	}
	f.pastAuth = append(f.pastAuth, pastAuthState{until: index, state: f.auth.clone()})
}

// authAt returns the auth state in effect at index, as far as pastAuth
// reaches back.
func (f *FSM) authAt(index uint64) *authState {
	for i := range f.pastAuth {
		if index < f.pastAuth[i].until {
			return &f.pastAuth[i].state
		}
	}
	return &f.auth
}

// ReadableAt reports whether user could read path at index, with the
// token whose SHA-256 is tokenDigest (nil: a user proved otherwise) still
// recorded then: auth disabled then, or the token known and the user's
// roles granting read on path. It ignores the token's expiry, which is a
// matter of clocks, not of the log. For the watch registry, under the
// state machine's lock.
func (f *FSM) ReadableAt(user string, tokenDigest []byte, path string, index uint64) bool {
	a := f.authAt(index)
	if !a.enabled {
		return true
	}
	if tokenDigest != nil {
		t, ok := a.tokens.Get(authToken{digest: string(tokenDigest)})
		if !ok || t.user != user {
			return false
		}
	}
	return a.permitted(user, command.PermRead, path)
}
