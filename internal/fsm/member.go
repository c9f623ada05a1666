package fsm

import (
	"sort"

	"github.com/latch-io/latch/internal/command"
)

// setMember inserts m or replaces the member with m's ID. The slice is
// copied: clones share the old one.
func (f *FSM) setMember(m command.Member) {
	members := make([]command.Member, 0, len(f.members)+1)
	for _, old := range f.members {
		if old.ID != m.ID {
			members = append(members, old)
		}
	}
	members = append(members, m)
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	f.members = members
}

// removeMember removes the member with id, if any.
func (f *FSM) removeMember(id uint64) {
	members := make([]command.Member, 0, len(f.members))
	for _, old := range f.members {
		if old.ID != id {
			members = append(members, old)
		}
	}
	f.members = members
}
