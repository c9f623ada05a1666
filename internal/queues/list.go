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
// without a queue node is listed with a null holder, as its read is.
func (q *Queues) ListLocks(ctx context.Context, page Page, consistency string, minIndex uint64) (api.LockList, error) {
	if err := q.cfg.Replica.Barrier(ctx, consistency, minIndex); err != nil {
		return api.LockList{}, err
	}
	out := api.LockList{Locks: []api.LockEntry{}}
	out.Index = q.cfg.Replica.View(func(f *fsm.FSM) {
		names, more := pageOf(f, LocksRoot, page)
		for _, name := range names {
			members, _ := queueIn(f, LocksRoot+"/"+name, lockPrefix)
			entry := api.LockEntry{Name: name}
			if len(members) > 0 {
				m := members[0]
				// The holder's id is its bearer secret: a listing shows its handle.
				entry.Holder = &api.Holder{SessionHandle: api.FormatSessionHandle(m.owner), FencingToken: m.token, Path: m.path}
				entry.Waiters = len(members) - 1
			}
			out.Locks = append(out.Locks, entry)
		}
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
		for _, role := range roles {
			members, _ := queueIn(f, ElectionsRoot+"/"+role, candidatePrefix)
			entry := api.ElectionEntry{Role: role, Candidates: len(members)}
			if len(members) > 0 {
				m := members[0]
				entry.Leader = &api.Leader{SessionHandle: api.FormatSessionHandle(m.owner), Value: string(m.value), FencingToken: m.token}
			}
			out.Elections = append(out.Elections, entry)
		}
		out.Truncated, out.NextAfter = more, nextAfter(roles, more)
	})
	return out, nil
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
