package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestAuthSurvivesLeaderChangeAndRestart: the auth state (users, grants,
// tokens, the enabled flag) is replicated state: after the leader crashes,
// the new leader enforces the same permissions and accepts the same
// tokens; the crashed member, restarted from its snapshot and log, does too
// and ends with the same state hash.
func TestAuthSurvivesLeaderChangeAndRestart(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{SnapshotEvery: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	leader := c.WaitLeader(30 * time.Second)
	f := setUpAuth(t, ctx, c.URL(leader))
	// Enough writes after the set-up for every member to snapshot a state
	// holding the auth state.
	for i := 0; i < 8; i++ {
		mustOK(t, ctx, f.writer, "PUT", fmt.Sprintf("%s/v1/kv/app/n%d", f.base, i), `{"value":"v"}`)
	}
	check := func(base string) {
		t.Helper()
		mustOK(t, ctx, f.reader, "GET", base+"/v1/kv/app/x", "")
		mustOK(t, ctx, f.writer, "PUT", base+"/v1/kv/app/after", `{"value":"v"}`)
		if status, reply := sendAs(t, ctx, f.reader, "PUT", base+"/v1/kv/app/after", `{"value":"v"}`); status != http.StatusForbidden {
			t.Errorf("reader's write at %s: %d %s", base, status, reply)
		}
		if status, reply := sendAs(t, ctx, "", "GET", base+"/v1/kv/app/x", ""); status != http.StatusUnauthorized {
			t.Errorf("anonymous read at %s: %d %s", base, status, reply)
		}
	}
	next := crashLeader(t, c, leader)
	check(c.URL(next))
	restartAndCatchUp(t, c, leader, next)
	if !c.Nodes[leader].Server.AuthEnabled() {
		t.Fatal("the restarted member lost the auth state")
	}
	check(c.URL(leader))
}

// crashLeader crashes member leader and returns the member elected after it.
func crashLeader(t *testing.T, c *testcluster.Cluster, leader int) int {
	t.Helper()
	c.Crash(leader)
	var others []int
	for i := range c.Nodes {
		if i != leader {
			others = append(others, i)
		}
	}
	return c.LeaderIn(30*time.Second, others...)
}

// restartAndCatchUp restarts member i and waits until its state is
// member next's.
func restartAndCatchUp(t *testing.T, c *testcluster.Cluster, i, next int) {
	t.Helper()
	c.Restart(i)
	if !testcluster.WaitFor(30*time.Second, func() bool {
		h0, i0 := c.Nodes[next].Server.StateHash()
		h1, i1 := c.Nodes[i].Server.StateHash()
		return i0 == i1 && h0 == h1
	}) {
		t.Fatal("the restarted member never reached the leader's state")
	}
}
