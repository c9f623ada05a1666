package queues

import (
	"context"
	"sort"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// Page is one page of a listing: at most Limit names sorted bytewise, the
// first after After ("" = from the start).
type Page struct {
	After string
	Limit int
}

// ListLocks reports every lock (each a GET /v1/lock/{name}) whose name
// sorts after page.After, at most page.Limit of them, from one view of the
// state: Truncated, with NextAfter, when more follow. A lock directory
// without a queue node is listed with a null holder, as its read is. It
// needs the names and every queue in this group: a one-shard cluster
// (a sharded one pages with PageNames and reads with LockEntries).
func (q *Queues) ListLocks(ctx context.Context, page Page, consistency string, minIndex uint64) (api.LockList, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return api.LockList{}, err
	}
	out := api.LockList{Locks: []api.LockEntry{}}
	out.Index = q.cfg.Replica.View(func(f *fsm.FSM) {
		names, more := pageOf(f, LocksRoot, page)
		out.Locks = append(out.Locks, lockEntriesIn(f, names)...)
		out.Truncated, out.NextAfter = more, nextAfter(names, more)
	})
	return out, nil
}

// ListElections is ListLocks for elections (each a GET /v1/election/{role}).
func (q *Queues) ListElections(ctx context.Context, page Page, consistency string, minIndex uint64) (api.ElectionList, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return api.ElectionList{}, err
	}
	out := api.ElectionList{Elections: []api.ElectionEntry{}}
	out.Index = q.cfg.Replica.View(func(f *fsm.FSM) {
		roles, more := pageOf(f, ElectionsRoot, page)
		out.Elections = append(out.Elections, electionEntriesIn(f, roles)...)
		out.Truncated, out.NextAfter = more, nextAfter(roles, more)
	})
	return out, nil
}

// NamesPage is one page of the names under LocksRoot or ElectionsRoot.
type NamesPage struct {
	Names     []string // sorted bytewise
	Truncated bool
	NextAfter string
	Index     uint64 // the applied index of the view the names were read from
}

// PageNames reads the page of names under root (LocksRoot or
// ElectionsRoot) from one view, after the barrier: in a sharded cluster
// this group must hold root's children. Their queues may be in other
// groups (LockEntries, ElectionEntries).
func (q *Queues) PageNames(ctx context.Context, root string, page Page, consistency string, minIndex uint64) (NamesPage, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return NamesPage{}, err
	}
	var out NamesPage
	out.Index = q.cfg.Replica.View(func(f *fsm.FSM) {
		out.Names, out.Truncated = pageOf(f, root, page)
		out.NextAfter = nextAfter(out.Names, out.Truncated)
	})
	return out, nil
}

// LockEntries reads the locks names, whose queues this group holds, from
// one view after the barrier, in the order of names; it returns that
// view's applied index.
func (q *Queues) LockEntries(ctx context.Context, names []string, consistency string, minIndex uint64) ([]api.LockEntry, uint64, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return nil, 0, err
	}
	var out []api.LockEntry
	index := q.cfg.Replica.View(func(f *fsm.FSM) { out = lockEntriesIn(f, names) })
	return out, index, nil
}

// ElectionEntries is LockEntries for elections.
func (q *Queues) ElectionEntries(ctx context.Context, roles []string, consistency string, minIndex uint64) ([]api.ElectionEntry, uint64, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return nil, 0, err
	}
	var out []api.ElectionEntry
	index := q.cfg.Replica.View(func(f *fsm.FSM) { out = electionEntriesIn(f, roles) })
	return out, index, nil
}

// lockEntriesIn reads the locks names from the state f, under the
// caller's View.
func lockEntriesIn(f *fsm.FSM, names []string) []api.LockEntry {
	out := make([]api.LockEntry, 0, len(names))
	for _, name := range names {
		members, _ := queueIn(f, LocksRoot+"/"+name, lockPrefix)
		entry := api.LockEntry{Name: name}
		if len(members) > 0 {
			m := members[0]
			// The holder's id is its bearer secret: a listing shows its handle.
			entry.Holder = &api.Holder{SessionHandle: api.FormatSessionHandle(m.owner), FencingToken: m.token, Path: m.path}
			entry.Waiters = len(members) - 1
		}
		out = append(out, entry)
	}
	return out
}

// electionEntriesIn reads the elections roles from the state f, under the
// caller's View.
func electionEntriesIn(f *fsm.FSM, roles []string) []api.ElectionEntry {
	out := make([]api.ElectionEntry, 0, len(roles))
	for _, role := range roles {
		members, _ := queueIn(f, ElectionsRoot+"/"+role, candidatePrefix)
		entry := api.ElectionEntry{Role: role, Candidates: len(members)}
		if len(members) > 0 {
			m := members[0]
			entry.Leader = &api.Leader{SessionHandle: api.FormatSessionHandle(m.owner), Value: string(m.value), FencingToken: m.token}
		}
		out = append(out, entry)
	}
	return out
}

// pageOf returns the children of root on the page, and whether more follow;
// none when root does not exist (no lock or election was ever made).
func pageOf(f *fsm.FSM, root string, page Page) (names []string, more bool) {
	all, err := f.Children(root)
	if err != nil {
		return nil, false
	}
	start := sort.SearchStrings(all, page.After)
	if start < len(all) && all[start] == page.After {
		start++
	}
	all = all[start:]
	if len(all) > page.Limit {
		return all[:page.Limit], true
	}
	return all, false
}

// nextAfter is the After of the next page: the last name of this one when
// more follow.
func nextAfter(names []string, more bool) string {
	if !more || len(names) == 0 {
		return ""
	}
	return names[len(names)-1]
}
