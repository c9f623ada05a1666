package fsm

import (
	"sort"

	"github.com/latch-io/latch/internal/command"
)

// setMember inserts m or replaces the member with m's ID. A member added
// again after its removal (raft committed it, so it is one again) leaves
// the removed set.
func (f *FSM) setMember(m command.Member) {
	f.members = withMember(f.members, m)
	f.removed = withoutMember(f.removed, m.ID)
}

// removeMember removes the member with id, if any, and records it in the
// removed set: as it was, or by its id alone if it was no member. A removed
// member removed again keeps its first record.
func (f *FSM) removeMember(id uint64) {
	m, isMember := f.Member(id)
	if !isMember {
		if _, removed := f.RemovedMember(id); removed {
			return
		}
		m = command.Member{ID: id}
	}
	f.members = withoutMember(f.members, id)
	f.removed = withMember(f.removed, m)
}

// findMember returns where id is or belongs in list, sorted by ID, and
// whether it is there.
func findMember(list []command.Member, id uint64) (int, bool) {
	i := sort.Search(len(list), func(i int) bool { return list[i].ID >= id })
	return i, i < len(list) && list[i].ID == id
}

// withMember returns a copy of list, sorted by ID, with m inserted or
// replacing the member of its ID. list is not modified: clones share it.
func withMember(list []command.Member, m command.Member) []command.Member {
	i, found := findMember(list, m.ID)
	out := make([]command.Member, 0, len(list)+1)
	out = append(out, list[:i]...)
	out = append(out, m)
	if found {
		i++
	}
	return append(out, list[i:]...)
}

// withoutMember returns list without the member of id: list itself if it
// has none, else a copy.
func withoutMember(list []command.Member, id uint64) []command.Member {
	i, found := findMember(list, id)
	if !found {
		return list
	}
	out := make([]command.Member, 0, len(list)-1)
	out = append(out, list[:i]...)
	return append(out, list[i+1:]...)
}
