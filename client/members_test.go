package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/latch-io/latch/api"
)

// fakeMembership is a two-server cluster for membership calls: the
// follower answers 503 with a leader hint; the leader keeps a member table
// and, while loseReplies > 0, applies a change but answers 503 "outcome
// unknown" (a reply lost to a timeout), as a real leader may.
type fakeMembership struct {
	follower, leader *httptest.Server

	mu          sync.Mutex // guards the fields below
	members     []api.Member
	loseReplies int
	caughtUp    bool // whether promotions are accepted
	seenByLead  int  // membership requests the leader received
}

func newFakeMembership(t *testing.T) *fakeMembership {
	f := &fakeMembership{members: []api.Member{{ID: api.FormatID(1), Name: "n1", PeerURL: "n1:2380"}}}
	f.leader = httptest.NewServer(http.HandlerFunc(f.serveLeader))
	f.follower = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			f.serveLeader(w, r) // reads are served anywhere
			return
		}
		writeFakeError(w, &api.Error{Code: api.CodeUnavailable, Message: "not the leader", LeaderHint: f.leader.URL})
	}))
	t.Cleanup(f.leader.Close)
	t.Cleanup(f.follower.Close)
	return f
}

func writeFakeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: *e})
}

func (f *fakeMembership) serveLeader(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == "GET" {
		_ = json.NewEncoder(w).Encode(api.Members{Members: f.members})
		return
	}
	f.seenByLead++
	reply, apiErr := f.applyLocked(r)
	if apiErr != nil {
		writeFakeError(w, apiErr)
		return
	}
	if f.loseReplies > 0 {
		f.loseReplies--
		writeFakeError(w, &api.Error{Code: api.CodeUnavailable, Message: "outcome unknown", LeaderHint: f.leader.URL})
		return
	}
	_ = json.NewEncoder(w).Encode(reply)
}

// applyLocked performs one membership request on the table.
func (f *fakeMembership) applyLocked(r *http.Request) (any, *api.Error) {
	name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/cluster/members/"), "/promote")
	index := -1
	for i, m := range f.members {
		if m.Name == name {
			index = i
		}
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/cluster/members":
		var req AddMemberRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		for _, m := range f.members {
			if m.Name == req.Name {
				return nil, &api.Error{Code: api.CodePreconditionFailed, Message: "already exists"}
			}
		}
		m := api.Member{ID: api.FormatID(uint64(len(f.members) + 1)), Name: req.Name, PeerURL: req.PeerURL, Learner: true}
		f.members = append(f.members, m)
		return m, nil
	case index < 0:
		return nil, &api.Error{Code: api.CodeNotFound, Message: "no member named " + name}
	case r.Method == "DELETE":
		f.members = append(f.members[:index], f.members[index+1:]...)
		return map[string]bool{"removed": true}, nil
	case !f.members[index].Learner:
		return nil, &api.Error{Code: api.CodePreconditionFailed, Message: "not a learner"}
	case !f.caughtUp:
		f.caughtUp = true // the next attempt finds it caught up
		return nil, &api.Error{Code: api.CodePreconditionFailed, Message: "has not caught up"}
	default:
		f.members[index].Learner = false
		return f.members[index], nil
	}
}

func TestMembershipCalls(t *testing.T) {
	tests := []struct {
		name        string
		loseReplies int
	}{
		{"replies arrive", 0},
		{"first reply of each change lost", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeMembership(t)
			c := newTestClient(t, []string{f.follower.URL}, nil)
			ctx := t.Context()

			f.setLoseReplies(tt.loseReplies)
			added, err := c.AddMember(ctx, AddMemberRequest{Name: "n4", PeerURL: "n4:2380", Learner: true})
			if err != nil || added.Name != "n4" || !added.Learner {
				t.Fatalf("AddMember: %+v, %v", added, err)
			}
			f.setLoseReplies(tt.loseReplies)
			promoted, err := c.WaitPromoteMember(ctx, "n4")
			if err != nil || promoted.Learner {
				t.Fatalf("WaitPromoteMember: %+v, %v", promoted, err)
			}
			f.setLoseReplies(tt.loseReplies)
			if err := c.RemoveMember(ctx, "n4"); err != nil {
				t.Fatalf("RemoveMember: %v", err)
			}
			if _, err := c.FindMember(ctx, "n4"); api.CodeOf(err) != api.CodeNotFound {
				t.Fatalf("FindMember after removal: %v, want not_found", err)
			}
			if f.requestsSeen() == 0 {
				t.Fatalf("no request reached the leader: the hint was not followed")
			}
		})
	}
}

func TestMembershipCallsReportRealConflicts(t *testing.T) {
	f := newFakeMembership(t)
	c := newTestClient(t, []string{f.leader.URL}, nil)
	ctx := t.Context()
	if _, err := c.AddMember(ctx, AddMemberRequest{Name: "n1", PeerURL: "elsewhere:2380"}); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Errorf("adding n1 with another peer URL: %v, want precondition_failed", err)
	}
	if err := c.RemoveMember(ctx, "n9"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("removing unknown n9: %v, want not_found", err)
	}
	if _, err := c.WaitPromoteMember(ctx, "n9"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("promoting unknown n9: %v, want not_found", err)
	}
	if m, err := c.FindMember(ctx, api.FormatID(1)); err != nil || m.Name != "n1" {
		t.Errorf("FindMember by id: %+v, %v", m, err)
	}
}

func (f *fakeMembership) setLoseReplies(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loseReplies = n
}

func (f *fakeMembership) requestsSeen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seenByLead
}
