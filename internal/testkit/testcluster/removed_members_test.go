package testcluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestRemovedMemberRememberedAcrossRestart: raft ids are never reused and a
// member's id derives from its name, so a removed member's name must be
// refused for good. Once a snapshot covers the removal and every server
// restarted, the removal is known only from the replicated state: re-adding
// the name is still 409, and repeating the removal is still 200, on every
// member.
func TestRemovedMemberRememberedAcrossRestart(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			c := New(t, size, Options{SnapshotEvery: 1})
			ctx := ctxT(t, 60*time.Second)
			leader := c.WaitLeader(10 * time.Second)
			add := map[string]any{"name": "n4", "peer_url": "127.0.0.1:2399", "learner": true}
			var added api.Member
			if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members", nil, add, &added); err != nil {
				t.Fatalf("add n4: %v", err)
			}
			if err := Do(ctx, "DELETE", c.URL(leader), "/v1/cluster/members/n4", nil, nil, nil); err != nil {
				t.Fatalf("remove n4: %v", err)
			}
			// Every node's newest snapshot must cover the removal, so that the
			// restart cannot learn it by replaying the log. A snapshot is cut
			// in the background and one due while another is written is
			// skipped, so write until each node has one past the first write
			// after the removal (bounded).
			first, err := Put(ctx, c.URL(leader), "/after/0", "v", "")
			if err != nil {
				t.Fatalf("put /after/0: %v", err)
			}
			covered := func() bool {
				for i := range c.Nodes {
					if s := c.SnapshotIndexes(i); len(s) == 0 || s[len(s)-1] < first.Index {
						return false
					}
				}
				return true
			}
			for n := 1; !covered(); n++ {
				if n > 200 {
					t.Fatalf("no snapshot covering index %d on every node after %d writes: %v", first.Index, n, c.SnapshotIndexes(0))
				}
				last, err := Put(ctx, c.URL(leader), fmt.Sprintf("/after/%d", n), "v", "")
				if err != nil {
					t.Fatalf("put /after/%d: %v", n, err)
				}
				c.WaitApplied(last.Index, 10*time.Second)
			}
			for i := range c.Nodes {
				c.Stop(i)
			}
			for i := range c.Nodes {
				c.Restart(i)
			}
			leader = c.WaitLeader(10 * time.Second)
			for i := range c.Nodes {
				var reply map[string]bool
				if err := Do(ctx, "DELETE", c.URL(i), "/v1/cluster/members/n4", nil, nil, &reply); err != nil || !reply["removed"] {
					t.Errorf("repeated removal of n4 through %s after the restart: %v, %v; want 200 {\"removed\":true}", c.Nodes[i].Name, reply, err)
				}
				var hex map[string]bool
				if err := Do(ctx, "DELETE", c.URL(i), "/v1/cluster/members/"+added.ID, nil, nil, &hex); err != nil || !hex["removed"] {
					t.Errorf("repeated removal of %s through %s after the restart: %v, %v; want 200 {\"removed\":true}", added.ID, c.Nodes[i].Name, hex, err)
				}
			}
			err = Do(ctx, "POST", c.URL(leader), "/v1/cluster/members", nil, add, nil)
			if api.CodeOf(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "was removed") {
				t.Fatalf("re-adding removed n4 after the restart: %v; want 409 precondition_failed saying it was removed", err)
			}
			var members api.Members
			if err := Do(ctx, "GET", c.URL(leader), "/v1/cluster/members", nil, nil, &members); err != nil || len(members.Members) != size {
				t.Fatalf("members %+v, %v; want the %d original ones", members, err, size)
			}
			c.EnsureSame(10 * time.Second)
		})
	}
}
