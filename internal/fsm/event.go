package fsm

import (
	"fmt"

	"github.com/latch-io/latch/api"
)

// EventKind is the kind of a watch event.
type EventKind uint8

// The watch events of docs/api.md.
const (
	EventCreated EventKind = iota
	EventChanged
	EventDeleted
	EventChildrenChanged
)

// String returns the docs/api.md name of k (api.EventCreated...).
func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return api.EventCreated
	case EventChanged:
		return api.EventChanged
	case EventDeleted:
		return api.EventDeleted
	case EventChildrenChanged:
		return api.EventChildrenChanged
	default:
		return fmt.Sprintf("EventKind(%d)", uint8(k))
	}
}

// Event is a change to one node made by an applied entry. Version is the
// node's version after the change (for EventDeleted, its last version; for
// EventChildrenChanged, the parent's unchanged version). Index is the
// entry's raft index.
type Event struct {
	Kind    EventKind
	Path    string
	Version uint64
	Index   uint64
}
