package server

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// SessionByHandle returns the id of the live session whose public handle
// (api.SessionHandle) is handle, from this replica's applied state. It is
// for the process that embeds the server (tests, operator tooling): no HTTP
// route reaches it, since an id is a bearer secret and a handle must never
// lead back to one over the API.
func (s *Server) SessionByHandle(handle uint64) (uint64, bool) {
	var sessions []fsm.Session
	s.metaGroup().View(func(f *fsm.FSM) { sessions = f.Sessions() })
	for _, sess := range sessions {
		if api.SessionHandle(sess.ID) == handle {
			return sess.ID, true
		}
	}
	return 0, false
}
