package client

import (
	"net/url"
	"strconv"
)

// WriteOption adjusts a Put or a Delete.
type WriteOption func(*writeOptions)

type writeOptions struct {
	prevVersion string // "", "any", "none" or a decimal version
	ephemeral   bool
	sequential  bool
	recursive   bool
	session     *Session
}

// PrevVersion makes the write succeed only if the node's current version is
// n (compare-and-set); otherwise the server answers precondition_failed.
func PrevVersion(n uint64) WriteOption {
	return func(o *writeOptions) { o.prevVersion = strconv.FormatUint(n, 10) }
}

// PrevAny makes the write unconditional (the default).
func PrevAny() WriteOption { return func(o *writeOptions) { o.prevVersion = "any" } }

// PrevNone makes a Put succeed only if the node does not exist yet.
func PrevNone() WriteOption { return func(o *writeOptions) { o.prevVersion = "none" } }

// Ephemeral makes a Put create a node owned by the session given with
// WithSession; it is deleted when that session ends.
func Ephemeral() WriteOption { return func(o *writeOptions) { o.ephemeral = true } }

// Sequential makes a Put append a per-parent, zero-padded counter to the
// path's last segment; the reply's Path is the created name.
func Sequential() WriteOption { return func(o *writeOptions) { o.sequential = true } }

// Recursive makes a Delete remove the node's whole subtree.
func Recursive() WriteOption { return func(o *writeOptions) { o.recursive = true } }

// WithSession scopes the write to s: it carries s's id and a fresh
// request_seq, so retries after failover are applied exactly once.
func WithSession(s *Session) WriteOption { return func(o *writeOptions) { o.session = s } }

// query encodes the options shared by Put and Delete.
func (o *writeOptions) query() url.Values {
	q := url.Values{}
	if o.prevVersion != "" {
		q.Set("prev_version", o.prevVersion)
	}
	return q
}

// ReadOption adjusts a Get or a Children.
type ReadOption func(*readOptions)

type readOptions struct {
	stale bool
}

// Stale lets any server answer from its local state, which may lag the
// leader. The client still never reads older state than it has seen: it
// sends the highest index it knows as min_index.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

// query encodes the read options; minIndex is the client's min_index
// (Client.minIndex).
func (o *readOptions) query(minIndex string) url.Values {
	q := url.Values{}
	if o.stale {
		q.Set("consistency", "stale")
		if minIndex != "" {
			q.Set("min_index", minIndex)
		}
	}
	return q
}
