package fencing

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken is matched (errors.Is) by every rejection of a token below
// the highest one accepted for its resource.
var ErrStaleToken = errors.New("fencing: stale token")

// StaleTokenError is the error of a rejected token. It matches
// ErrStaleToken.
type StaleTokenError struct {
	Resource string
	Token    uint64 // the rejected token
	Highest  uint64 // the highest token accepted for Resource
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for resource %q: token %d was already accepted", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard decides whether a write carrying a fencing token may proceed.
// Implementations are safe for concurrent use.
type Guard interface {
	// Check reports whether token is acceptable for resource (nil, or an
	// error matching ErrStaleToken) without recording anything.
	Check(resource string, token uint64) error
	// Accept records token as resource's highest if it is not lower than
	// the highest so far, and returns nil; a lower token returns an error
	// matching ErrStaleToken. A durable Guard returns nil only once the
	// token is on stable storage.
	Accept(resource string, token uint64) error
}

// Memory is a Guard that keeps its tokens in memory only.
type Memory struct {
	mu      sync.Mutex        // guards highest
	highest map[string]uint64 // resource -> highest accepted token
}

// NewMemory returns an empty in-memory Guard.
func NewMemory() *Memory { return &Memory{highest: map[string]uint64{}} }

// Check implements Guard.
func (m *Memory) Check(resource string, token uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return checkAgainst(resource, token, m.highest)
}

// Accept implements Guard.
func (m *Memory) Accept(resource string, token uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkAgainst(resource, token, m.highest); err != nil {
		return err
	}
	m.highest[resource] = token
	return nil
}

// Highest returns the highest token accepted for resource, and whether any was.
func (m *Memory) Highest(resource string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	token, ok := m.highest[resource]
	return token, ok
}

// checkAgainst applies the fencing rule to token given the highest tokens.
func checkAgainst(resource string, token uint64, highest map[string]uint64) error {
	if seen, ok := highest[resource]; ok && token < seen {
		return &StaleTokenError{Resource: resource, Token: token, Highest: seen}
	}
	return nil
}
