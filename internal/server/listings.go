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
// a time, after the usual barrier. With one shard each is one read of one
// view. With several, the names of the locks (the children of /locks) live
// in one shard, but each lock's queue lives in the shard of its own
// directory's children: a listing pages the names in their shard, then
// reads the page's queues shard by shard, each at its own index
// (listQueues). Sessions live in the meta group, but each shard counts the
// ephemeral nodes a session has there: ListSessions reads every shard once.

// Page is one page of a listing: at most Limit entries sorted by name (by
// handle for sessions), the first after After ("" = from the start).
type Page = queues.Page

// ListLocks lists the locks on the page (queues.Queues.ListLocks).
func (s *Server) ListLocks(ctx context.Context, page Page, opts ReadOptions) (api.LockList, error) {
	if err := s.authorizeAs(ctx, permRead, queues.LocksRoot, 0); err != nil {
		return api.LockList{}, err
	}
	if s.cfg.Shards <= 1 {
		g := s.metaGroup()
		return g.queues.ListLocks(ctx, page, opts.Consistency, opts.minIndexIn(g))
	}
	listed, err := listQueues(ctx, s, queues.LocksRoot, page, opts, (*queues.Queues).LockEntries)
	if err != nil {
		return api.LockList{}, err
	}
	return api.LockList{
		Locks: listed.entries, Truncated: listed.names.Truncated, NextAfter: listed.names.NextAfter,
		Index: listed.names.Index, Indexes: listed.indexes,
	}, nil
}

// ListElections lists the elections on the page (queues.Queues.ListElections).
func (s *Server) ListElections(ctx context.Context, page Page, opts ReadOptions) (api.ElectionList, error) {
	if err := s.authorizeAs(ctx, permRead, queues.ElectionsRoot, 0); err != nil {
		return api.ElectionList{}, err
	}
	if s.cfg.Shards <= 1 {
		g := s.metaGroup()
		return g.queues.ListElections(ctx, page, opts.Consistency, opts.minIndexIn(g))
	}
	listed, err := listQueues(ctx, s, queues.ElectionsRoot, page, opts, (*queues.Queues).ElectionEntries)
	if err != nil {
		return api.ElectionList{}, err
	}
	return api.ElectionList{
		Elections: listed.entries, Truncated: listed.names.Truncated, NextAfter: listed.names.NextAfter,
		Index: listed.names.Index, Indexes: listed.indexes,
	}, nil
}

// queuesPage is a page of a sharded listing: the names, read from one view
// of their shard, and an entry per name, in the names' order.
type queuesPage[E any] struct {
	names   queues.NamesPage
	entries []E
	indexes map[int]uint64 // shard -> the highest applied index read there
}

// entriesReader reads the entries of names whose queues one group holds
// (queues.Queues.LockEntries, ElectionEntries).
type entriesReader[E any] func(q *queues.Queues, ctx context.Context, names []string, consistency string, minIndex uint64) ([]E, uint64, error)

// listQueues pages the names under root (LocksRoot or ElectionsRoot) in the
// shard of root's children, then reads each name's queue in the shard of
// its directory's children, one barrier and one view per shard. The cursor
// (page.After) is a name, and every name lives in that one shard, so pages
// neither skip nor repeat a name; a queue is read at its shard's index,
// which is later than the names' view, so a lock may show a holder
// acquired after its name was listed.
func listQueues[E any](ctx context.Context, s *Server, root string, page Page, opts ReadOptions, read entriesReader[E]) (queuesPage[E], error) {
	namesGroup := s.childGroup(root)
	names, err := namesGroup.queues.PageNames(ctx, root, page, opts.Consistency, opts.minIndexIn(namesGroup))
	if err != nil {
		return queuesPage[E]{}, err
	}
	out := queuesPage[E]{names: names, entries: make([]E, len(names.Names)), indexes: map[int]uint64{namesGroup.shard: names.Index}}
	byShard := map[int][]int{} // shard -> positions in names.Names
	for i, name := range names.Names {
		shard := s.shards.ChildShard(root + "/" + name)
		byShard[shard] = append(byShard[shard], i)
	}
	for shard, positions := range byShard {
		g := s.groups[shard].Load()
		minIndex := opts.vectorIndexIn(g)
		if g == namesGroup {
			minIndex = opts.minIndexIn(g)
		}
		batch := make([]string, len(positions))
		for j, i := range positions {
			batch[j] = names.Names[i]
		}
		entries, index, err := read(g.queues, ctx, batch, opts.Consistency, minIndex)
		if err != nil {
			return queuesPage[E]{}, err
		}
		for j, i := range positions {
			out.entries[i] = entries[j]
		}
		out.indexes[shard] = max(out.indexes[shard], index)
	}
	return out, nil
}

// ListSessions lists the live sessions on the page, by handle, never by id.
// On the leader each carries the time left before it expires without a
// heartbeat; Count and ExpiringSoon cover every live session. The index is
// the meta group's. With several shards a session's ephemeral nodes are
// counted in every shard (shard 0's session, the others' local records),
// so every shard is read once, after its own barrier (barrierEvery, all at
// once; the integer min_index is the meta group's), whatever the page's
// length, and each entry's EphemeralCount sums them: no one snapshot of
// the cluster.
func (s *Server) ListSessions(ctx context.Context, page Page, opts ReadOptions) (api.SessionList, error) {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return api.SessionList{}, err
	}
	groups, err := s.barrierEvery(ctx, opts, MetaShard)
	if err != nil {
		return api.SessionList{}, err
	}
	var live []fsm.Session
	index := groups[MetaShard].View(func(f *fsm.FSM) { live = f.Sessions() })
	left, leading := groups[MetaShard].sessions.Remaining()
	all := make([]listedSession, 0, len(live))
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
		all = append(all, listedSession{entry, sess.ID})
	}
	listed, truncated := sessionPage(all, page)
	inOtherShards(groups, func(f *fsm.FSM) {
		for i := range listed {
			listed[i].EphemeralCount += ephemeralsIn(f, listed[i].id)
		}
	})
	out.Sessions, out.Truncated = make([]api.SessionEntry, len(listed)), truncated
	for i, l := range listed {
		out.Sessions[i] = l.SessionEntry
	}
	if out.Truncated {
		out.NextAfter = out.Sessions[len(out.Sessions)-1].SessionHandle
	}
	return out, nil
}

// listedSession is an entry of ListSessions with its session's id.
type listedSession struct {
	api.SessionEntry
	id uint64
}

// sessionPage sorts entries by handle and cuts the page out of them.
func sessionPage(entries []listedSession, page Page) ([]listedSession, bool) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].SessionHandle < entries[j].SessionHandle })
	start := sort.Search(len(entries), func(i int) bool { return entries[i].SessionHandle > page.After })
	entries = entries[start:]
	if len(entries) > page.Limit {
		return entries[:page.Limit], true
	}
	return entries, false
}
