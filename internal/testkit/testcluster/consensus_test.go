package testcluster

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// TestUndecodableEntryStopsReplicas commits an entry no replica can
// decode, as a peer running a binary with another command format would
// propose it (a raw MsgProp through the leader's transport handler). Every
// replica stops before applying it, with an error naming its raft index and
// why, instead of skipping it: a replica that could decode it would diverge.
// Until the process exits, the member is not ready and serves no read, not
// even a stale one.
func TestUndecodableEntryStopsReplicas(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	if _, err := Put(ctx, c.URL(leader), "/before", "v", ""); err != nil {
		t.Fatalf("put: %v", err)
	}
	peer := c.Others(leader)[0]
	garbage := raftpb.Message{Type: raftpb.MsgProp, From: c.Nodes[peer].ID, To: c.Nodes[leader].ID,
		Entries: []raftpb.Entry{{Data: []byte{0xee, 0x01, 0x02, 0x03}}}}
	if err := c.Nodes[leader].Server.Process(ctx, 1, garbage); err != nil {
		t.Fatalf("leader did not take the proposal: %v", err)
	}

	// Every replica that learns the entry is committed stops at it. One that
	// never learns it (the last leader stopped before telling it the commit
	// index) cannot stop, but it is left without a quorum: it applies nothing
	// past the entry and takes no write. A quorum has the entry, so at least
	// a quorum of replicas stops.
	stopped := func(n *Node) bool {
		select {
		case <-n.Server.Done():
			return true
		default:
			return false
		}
	}
	quorumStopped := func() bool {
		count := 0
		for _, n := range c.Nodes {
			if stopped(n) {
				count++
			}
		}
		return count >= len(c.Nodes)/2+1
	}
	if !WaitFor(30*time.Second, quorumStopped) {
		t.Fatalf("fewer than a quorum of replicas stopped: the undecodable entry was skipped (%s)", c.describe())
	}
	allStopped := func() bool { return stopped(c.Nodes[0]) && stopped(c.Nodes[1]) && stopped(c.Nodes[2]) }
	WaitFor(5*time.Second, allStopped) // the last one usually learns the commit too
	var bad uint64
	for i, n := range c.Nodes {
		if !stopped(n) {
			continue
		}
		var undecodable *server.UndecodableEntryError
		err := n.Server.Err()
		if !errors.As(err, &undecodable) || !errors.Is(err, server.ErrUndecodableEntry) {
			t.Fatalf("%s stopped with %v, want an UndecodableEntryError", n.Name, err)
		}
		if bad != 0 && undecodable.Index != bad {
			t.Errorf("%s stopped at undecodable entry %d, another replica at %d: the replicas' logs differ", n.Name, undecodable.Index, bad)
		}
		bad = undecodable.Index
		if applied := n.Server.AppliedIndex(); applied != undecodable.Index-1 {
			t.Errorf("%s applied up to %d, want %d: just before the undecodable entry", n.Name, applied, undecodable.Index-1)
		}
		t.Logf("%s: %v", n.Name, err)
		if err := Do(ctx, http.MethodGet, c.URL(i), "/readyz", nil, nil, nil); api.CodeOf(err) != api.CodeUnavailable {
			t.Errorf("%s /readyz answered %v, want 503", n.Name, err)
		}
		if _, err := Get(ctx, c.URL(i), "/before", api.Stale); api.CodeOf(err) != api.CodeUnavailable {
			t.Errorf("%s served a stale read after stopping: %v", n.Name, err)
		}
	}
	for i, n := range c.Nodes {
		if stopped(n) {
			continue
		}
		t.Logf("%s never learned the entry was committed: it is left without a quorum", n.Name)
		if applied := n.Server.AppliedIndex(); applied >= bad {
			t.Errorf("%s is running and applied %d, at or past the undecodable entry %d", n.Name, applied, bad)
		}
		if _, err := Put(ctx, c.URL(i), "/after", "v", ""); err == nil {
			t.Errorf("%s took a write with a quorum of replicas stopped", n.Name)
		}
	}
}

// TestMembershipRepeatsAndAddresses: a repeated add of an identical member
// answers the member, one with other addresses is 409; a repeated remove
// answers success through any member, a never-member is 404; an add whose
// name or addresses are unusable is 400 invalid_argument naming the field,
// and changes nothing.
func TestMembershipRepeatsAndAddresses(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Others(leader)[0]
	add := func(base string, body map[string]any) (api.Member, error) {
		var m api.Member
		err := Do(ctx, http.MethodPost, base, "/v1/cluster/members", nil, body, &m)
		return m, err
	}

	invalid := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{name: "peer url not host:port", body: map[string]any{"name": "n8", "peer_url": "notaurl", "client_url": "http://127.0.0.1:2379"}, field: "peer_url"},
		{name: "client url not a URL", body: map[string]any{"name": "n8", "peer_url": "127.0.0.1:2380", "client_url": "alsonot"}, field: "client_url"},
		{name: "both wrong", body: map[string]any{"name": "n8", "peer_url": "notaurl", "client_url": "alsonot"}, field: "peer_url"},
		{name: "peer url without host", body: map[string]any{"name": "n8", "peer_url": ":2380"}, field: "peer_url"},
		{name: "peer url port 0", body: map[string]any{"name": "n8", "peer_url": "h:0"}, field: "peer_url"},
		{name: "peer url port too large", body: map[string]any{"name": "n8", "peer_url": "h:65536"}, field: "peer_url"},
		{name: "peer url missing", body: map[string]any{"name": "n8"}, field: "peer_url"},
		{name: "client url of another scheme", body: map[string]any{"name": "n8", "peer_url": "h:2380", "client_url": "ftp://h:2379"}, field: "client_url"},
		{name: "client url with a path", body: map[string]any{"name": "n8", "peer_url": "h:2380", "client_url": "http://h:2379/v1"}, field: "client_url"},
		{name: "client url without host", body: map[string]any{"name": "n8", "peer_url": "h:2380", "client_url": "http://:2379"}, field: "client_url"},
		{name: "name missing", body: map[string]any{"peer_url": "h:2380"}, field: "name"},
		{name: "name with =", body: map[string]any{"name": "n8=x", "peer_url": "h:2380"}, field: "name"},
		{name: "name with a slash", body: map[string]any{"name": "n8/x", "peer_url": "h:2380"}, field: "name"},
		{name: "name latchd --name refuses", body: map[string]any{"name": "n8:x", "peer_url": "h:2380"}, field: "name"},
		{name: "name over 63 characters", body: map[string]any{"name": strings.Repeat("n", 64), "peer_url": "h:2380"}, field: "name"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := add(c.URL(leader), tt.body)
			var apiErr *api.Error
			if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInvalidArgument || !strings.HasPrefix(apiErr.Message, tt.field+" ") {
				t.Fatalf("add %v answered %v, want 400 invalid_argument naming %s", tt.body, err, tt.field)
			}
		})
	}
	if members := c.Status(leader).Members; len(members) != 3 {
		t.Fatalf("refused adds changed the members: %+v", members)
	}

	n4 := map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "client_url": "http://127.0.0.1:2379", "learner": true}
	first, err := add(c.URL(leader), n4)
	if err != nil || !first.Learner || first.Voter {
		t.Fatalf("add n4: %+v, %v", first, err)
	}
	again, err := add(c.URL(leader), n4)
	if err != nil || again.ID != first.ID || again.PeerURL != first.PeerURL {
		t.Fatalf("repeated identical add: %+v, %v; want %+v", again, err, first)
	}
	for _, other := range []map[string]any{
		{"name": "n4", "peer_url": "elsewhere:2380", "learner": true},
		{"name": "n4", "peer_url": c.PeerURL("n4"), "client_url": "http://127.0.0.1:9999", "learner": true},
	} {
		if _, err := add(c.URL(leader), other); api.CodeOf(err) != api.CodePreconditionFailed {
			t.Errorf("add of n4 with other addresses %v answered %v, want 409 precondition_failed", other, err)
		}
	}

	for _, base := range []string{c.URL(leader), c.URL(leader), c.URL(follower)} {
		var removed map[string]bool
		if err := Do(ctx, http.MethodDelete, base, "/v1/cluster/members/n4", nil, nil, &removed); err != nil || !removed["removed"] {
			t.Fatalf("remove n4 through %s: %v, %v; want success, repeats included", base, removed, err)
		}
	}
	if err := Do(ctx, http.MethodDelete, c.URL(leader), "/v1/cluster/members/"+first.ID, nil, nil, nil); err != nil {
		t.Errorf("repeated remove of n4 by id: %v", err)
	}
	if err := Do(ctx, http.MethodDelete, c.URL(leader), "/v1/cluster/members/n9", nil, nil, nil); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("remove of a never-member answered %v, want 404", err)
	}
	if _, err := add(c.URL(leader), n4); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Errorf("re-add of a removed name answered %v, want 409", err)
	}
}

// TestMemberRoleFields: every member in /v1/status and /v1/cluster/members
// carries both "voter" and "learner", exactly one true.
func TestMemberRoleFields(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	if err := Do(ctx, http.MethodPost, c.URL(leader), "/v1/cluster/members", nil,
		map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "learner": true}, nil); err != nil {
		t.Fatalf("add learner n4: %v", err)
	}
	for _, path := range []string{"/v1/status", "/v1/cluster/members"} {
		var reply struct {
			Members []map[string]any `json:"members"`
		}
		if err := Do(ctx, http.MethodGet, c.URL(leader), path, nil, nil, &reply); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if len(reply.Members) != 4 {
			t.Fatalf("GET %s lists %d members, want 4: %v", path, len(reply.Members), reply.Members)
		}
		for _, m := range reply.Members {
			wantLearner := m["name"] == "n4"
			if m["voter"] != !wantLearner || m["learner"] != wantLearner {
				t.Errorf("GET %s: member %v: want voter %v and learner %v, both present", path, m, !wantLearner, wantLearner)
			}
		}
	}
}

// TestPromoteNeverStartedLearner: promoting a learner whose latchd never
// started is refused with the truth (it acknowledged nothing), not "active
// true" (raft counts a member it just added as recently active).
func TestPromoteNeverStartedLearner(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	if err := Do(ctx, http.MethodPost, c.URL(leader), "/v1/cluster/members", nil,
		map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "learner": true}, nil); err != nil {
		t.Fatalf("add learner n4: %v", err)
	}
	err := Do(ctx, http.MethodPost, c.URL(leader), "/v1/cluster/members/n4/promote", nil, nil, nil)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodePreconditionFailed ||
		!strings.Contains(apiErr.Message, "n4") || !strings.Contains(apiErr.Message, "acknowledged no entry") || strings.Contains(apiErr.Message, "active true") {
		t.Fatalf("promote of a never-started learner answered %v; want 409 saying it acknowledged nothing", err)
	}
}

// TestMinIndexBeyondCommit: a read whose min_index no write has reached yet
// is refused at once with 400 invalid_argument, on the leader and on a
// follower, stale or linearizable; one the cluster committed but a lagging
// follower has not applied still waits and succeeds.
func TestMinIndexBeyondCommit(t *testing.T) {
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Others(leader)[0]
	written, err := Put(ctx, c.URL(leader), "/m", "v1", "")
	if err != nil {
		t.Fatal(err)
	}
	beyond := written.Index + 1000
	for _, i := range []int{leader, follower} {
		for _, consistency := range []string{api.Stale, api.Linearizable} {
			started := time.Now()
			_, err := GetAt(ctx, c.URL(i), "/m", consistency, beyond)
			var apiErr *api.Error
			if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInvalidArgument || !strings.Contains(apiErr.Message, "beyond the cluster's commit index") {
				t.Errorf("%s %s read at min_index %d answered %v; want 400 invalid_argument", c.Nodes[i].Name, consistency, beyond, err)
			}
			if took := time.Since(started); took > time.Second {
				t.Errorf("%s %s read at min_index %d took %v; want an answer at once", c.Nodes[i].Name, consistency, beyond, took)
			}
		}
	}

	// The follower hears of new commits late: a min_index committed but
	// not yet known here must wait, not be refused.
	c.Net.SetDelay(c.Nodes[leader].ID, c.Nodes[follower].ID, 200*time.Millisecond)
	defer c.Net.Heal()
	written, err = Put(ctx, c.URL(leader), "/m", "v2", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := GetAt(ctx, c.URL(follower), "/m", api.Stale, written.Index); err != nil || got.Value != "v2" {
		t.Fatalf("stale read on a lagging follower at committed min_index %d: %+v, %v; want v2", written.Index, got, err)
	}
}
