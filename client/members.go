package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/latch-io/latch/api"
)

// Membership calls are decided by the leader: a follower answers 503 with a
// leader_hint, which the client adopts before it retries. Each call is safe
// to retry because the outcome is reconciled with the member table when a
// retry meets the effect of an earlier attempt (a lost reply):
//   - AddMember of a member that exists with the same name and peer URL
//     returns that member;
//   - RemoveMember of a member that was removed succeeds (the server
//     answers the repeat with success while it remembers the removal; and a
//     member that existed before the call and is gone after it counts as
//     removed);
//   - PromoteMember of a member that is already a voter succeeds.

// AddMemberRequest is the body of POST /v1/cluster/members.
type AddMemberRequest struct {
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url,omitempty"`
	// Learner keeps the member a non-voting learner. When false the leader
	// promotes it to voter by itself once it has caught up with the log; it
	// always joins as a learner first.
	Learner bool `json:"learner"`
}

// ErrMemberNotFound is returned, wrapped in an *api.Error with
// CodeNotFound, when no member has the given name or id.
var ErrMemberNotFound = errors.New("client: no such member")

// AddMember asks the cluster to add a member (as a learner). Start the new
// server with --initial-cluster-state existing; it may start before or after
// this call, and catches up by snapshot and log once added.
func (c *Client) AddMember(ctx context.Context, req AddMemberRequest) (*api.Member, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode member: %w", err)
	}
	var added api.Member
	err = c.do(ctx, &call{method: "POST", path: "/v1/cluster/members", body: body, out: &added})
	if api.CodeOf(err) == api.CodePreconditionFailed {
		// A retry of an add whose first reply was lost meets the member.
		if existing, findErr := c.FindMember(ctx, req.Name); findErr == nil && existing.PeerURL == req.PeerURL {
			return existing, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return &added, nil
}

// FindMember returns the member called nameOrID (a name or an id as
// api.FormatID renders it).
func (c *Client) FindMember(ctx context.Context, nameOrID string) (*api.Member, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	if m := lookupMember(members.Members, nameOrID); m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("%w: %w", api.Errorf(api.CodeNotFound, "no member named %q", nameOrID), ErrMemberNotFound)
}

// lookupMember finds nameOrID among members by name, then by id.
func lookupMember(members []api.Member, nameOrID string) *api.Member {
	for i := range members {
		if members[i].Name == nameOrID {
			return &members[i]
		}
	}
	id, err := api.ParseID(nameOrID)
	if err != nil {
		return nil
	}
	for i := range members {
		if memberID, err := api.ParseID(members[i].ID); err == nil && memberID == id {
			return &members[i]
		}
	}
	return nil
}

// RemoveMember removes the member nameOrID. The leader refuses it with
// CodePreconditionFailed when the voters left could not form a healthy
// quorum; removing the leader hands leadership to another voter first. The
// removed server stops by itself.
//
// Removing a member that was already removed succeeds: the server answers
// the repeat with success while it remembers the removal (since it
// started), and the client also counts as removed a member that existed
// when the call began and is unknown at its end.
func (c *Client) RemoveMember(ctx context.Context, nameOrID string) error {
	_, findErr := c.FindMember(ctx, nameOrID)
	if findErr != nil && !errors.Is(findErr, ErrMemberNotFound) {
		return findErr
	}
	err := c.do(ctx, &call{method: "DELETE", path: "/v1/cluster/members/" + nameOrID})
	if api.CodeOf(err) == api.CodeNotFound && findErr == nil {
		// It existed when the call began: an earlier attempt removed it
		// (removing the leader loses the old leader's reply when it stops).
		return nil
	}
	return err
}

// PromoteMember makes the learner nameOrID a voter. It fails with
// CodePreconditionFailed while the learner has not caught up; see
// WaitPromoteMember.
func (c *Client) PromoteMember(ctx context.Context, nameOrID string) (*api.Member, error) {
	var promoted api.Member
	err := c.do(ctx, &call{method: "POST", path: "/v1/cluster/members/" + nameOrID + "/promote", out: &promoted})
	if api.CodeOf(err) == api.CodePreconditionFailed {
		if m, findErr := c.FindMember(ctx, nameOrID); findErr == nil && !m.Learner {
			return m, nil // already a voter: an earlier attempt promoted it
		}
	}
	if err != nil {
		return nil, err
	}
	return &promoted, nil
}

// WaitPromoteMember retries PromoteMember while the learner has not caught
// up (CodePreconditionFailed), until it succeeds, fails otherwise or ctx
// ends; the last refusal is returned with ctx's error.
func (c *Client) WaitPromoteMember(ctx context.Context, nameOrID string) (*api.Member, error) {
	for attempt := 1; ; attempt++ {
		m, err := c.PromoteMember(ctx, nameOrID)
		if api.CodeOf(err) != api.CodePreconditionFailed {
			return m, err
		}
		if _, findErr := c.FindMember(ctx, nameOrID); findErr != nil {
			return nil, findErr // not a member at all: waiting will not help
		}
		if sleepErr := c.sleep(ctx, c.backoff(min(attempt, 4))); sleepErr != nil {
			return nil, fmt.Errorf("client: promote %s: %w (last refusal: %w)", nameOrID, sleepErr, err)
		}
	}
}

// TransferLeader moves leadership to the voter to (a name or an id) and
// returns the status of the server that answered once it moved.
func (c *Client) TransferLeader(ctx context.Context, to string) (*api.Status, error) {
	body, err := json.Marshal(api.LeaderTransferRequest{To: to})
	if err != nil {
		return nil, fmt.Errorf("client: encode transfer: %w", err)
	}
	var status api.Status
	if err := c.do(ctx, &call{method: "POST", path: "/v1/cluster/leader", body: body, out: &status}); err != nil {
		return nil, err
	}
	return &status, nil
}
