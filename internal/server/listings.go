package server

import (
	"context"
	"sort"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/queues"
)

// The read-only listings of docs/api.md ("Listings"), made for the
// dashboard and operators: every lock, election and live session, a page at
// a time. Each is one read of one group's state after the usual barrier.
// With sharding, locks and elections stay one listing each (a directory's
// children live in one group) and sessions stay in the meta group.

// Page is one page of a listing: at most Limit entries sorted by name (by
// handle for sessions), the first after After ("" = from the start).
type Page = queues.Page

// ListLocks lists the locks on the page (queues.Queues.ListLocks).
func (s *Server) ListLocks(ctx context.Context, page Page, opts ReadOptions) (api.LockList, error) {
	if err := s.authorizeAs(ctx, permRead, queues.LocksRoot, 0); err != nil {
		return api.LockList{}, err
	}
	g := s.groupFor(queues.LocksRoot)
	return g.queues.ListLocks(ctx, page, opts.Consistency, opts.minIndexIn(g))
}

// ListElections lists the elections on the page (queues.Queues.ListElections).
func (s *Server) ListElections(ctx context.Context, page Page, opts ReadOptions) (api.ElectionList, error) {
	if err := s.authorizeAs(ctx, permRead, queues.ElectionsRoot, 0); err != nil {
		return api.ElectionList{}, err
	}
	g := s.groupFor(queues.ElectionsRoot)
	return g.queues.ListElections(ctx, page, opts.Consistency, opts.minIndexIn(g))
}

// ListSessions lists the live sessions on the page, by handle, never by id.
// On the leader each carries the time left before it expires without a
// heartbeat; Count and ExpiringSoon cover every live session.
func (s *Server) ListSessions(ctx context.Context, page Page, opts ReadOptions) (api.SessionList, error) {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return api.SessionList{}, err
	}
	g := s.metaGroup()
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return api.SessionList{}, err
	}
	var live []fsm.Session
	index := g.View(func(f *fsm.FSM) { live = f.Sessions() })
	left, leading := g.sessions.Remaining()
	all := make([]api.SessionEntry, 0, len(live))
	out := api.SessionList{Count: len(live), ExpiryKnown: leading, Index: index}
	for _, sess := range live {
		entry := api.SessionEntry{SessionHandle: api.FormatSessionHandle(sess.ID), TimeoutMs: sess.TimeoutMs, EphemeralCount: sess.Ephemerals}
		if remaining, ok := left[sess.ID]; ok {
			ms := uint64(remaining / time.Millisecond)
			entry.ExpiresInMs = &ms
			if ms < sess.TimeoutMs/2 {
				out.ExpiringSoon++
			}
		}
		all = append(all, entry)
	}
	out.Sessions, out.Truncated = sessionPage(all, page)
	if out.Truncated {
		out.NextAfter = out.Sessions[len(out.Sessions)-1].SessionHandle
	}
	return out, nil
}

// sessionPage sorts entries by handle and cuts the page out of them.
func sessionPage(entries []api.SessionEntry, page Page) ([]api.SessionEntry, bool) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].SessionHandle < entries[j].SessionHandle })
	start := sort.Search(len(entries), func(i int) bool { return entries[i].SessionHandle > page.After })
	entries = entries[start:]
	if len(entries) > page.Limit {
		return entries[:page.Limit], true
	}
	return entries, false
}
