package testcluster

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestMembersReadIsLinearizable: a member list read from a follower that
// hears of commits late still shows a membership change the leader has
// acknowledged (it was a local read, so latchctl members could list a
// member it had just been told was removed); consistency=stale keeps the
// follower's own view for an operator whose member is cut off.
func TestMembersReadIsLinearizable(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Others(leader)[0]
	c.Net.SetDelay(c.Nodes[leader].ID, c.Nodes[follower].ID, 300*time.Millisecond)
	defer c.Net.Heal()

	body := map[string]any{"name": "n9", "peer_url": c.PeerURL("n9"), "learner": true}
	if err := Do(ctx, http.MethodPost, c.URL(leader), "/v1/cluster/members", nil, body, nil); err != nil {
		t.Fatalf("add n9: %v", err)
	}
	var members api.Members
	if err := Do(ctx, http.MethodGet, c.URL(follower), "/v1/cluster/members", nil, nil, &members); err != nil {
		t.Fatalf("members on the lagging follower: %v", err)
	}
	if !hasMember(members, "n9") {
		t.Fatalf("the lagging follower's linearizable member list %+v misses n9, which the leader acknowledged", members.Members)
	}
	var stale api.Members
	err := Do(ctx, http.MethodGet, c.URL(follower), "/v1/cluster/members", url.Values{"consistency": {api.Stale}}, nil, &stale)
	// The linearizable read above had the follower apply the add, and its
	// own view does not go back: the stale list has the three and n9.
	if err != nil || len(stale.Members) != 4 || !hasMember(stale, "n9") {
		t.Fatalf("stale member list: %+v, %v; want the 3 members and n9", stale, err)
	}
	err = Do(ctx, http.MethodGet, c.URL(follower), "/v1/cluster/members", url.Values{"consistency": {"eventual"}}, nil, nil)
	if api.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("members?consistency=eventual: %v, want 400 invalid_argument", err)
	}
}

func hasMember(m api.Members, name string) bool {
	for _, member := range m.Members {
		if member.Name == name {
			return true
		}
	}
	return false
}
