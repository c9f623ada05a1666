package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
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

// TestQuotaAcrossRestartAndSnapshot: a quota on /app/jobs set through
// POST /v1/auth refuses the create past it with 507 quota_exceeded on
// every member, after the leader crashed and came back from a snapshot
// holding the quota; GET /v1/auth shows the exact usage.
func TestQuotaAcrossRestartAndSnapshot(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{SnapshotEvery: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	leader := c.WaitLeader(30 * time.Second)
	f := setUpAuth(t, ctx, c.URL(leader))
	mustOK(t, ctx, f.root, "POST", f.base+"/v1/auth", `{"action":"quota_set","prefix":"/app/jobs","max_nodes":5,"max_bytes":100}`)
	for i := 0; i < 3; i++ { // /app/jobs and three jobs: 4 nodes, 30 bytes
		mustOK(t, ctx, f.writer, "PUT", fmt.Sprintf("%s/v1/kv/app/jobs/j%d", f.base, i), `{"value":"0123456789"}`)
	}
	refused := func(base string) {
		t.Helper()
		status, reply := sendAs(t, ctx, f.writer, "PUT", base+"/v1/kv/app/jobs/big", `{"value":"`+strings.Repeat("x", 80)+`"}`)
		if status != http.StatusInsufficientStorage || !strings.Contains(string(reply), "quota_exceeded") {
			t.Errorf("a create past the bytes quota at %s: %d %s", base, status, reply)
		}
	}
	refused(f.base)
	next := crashLeader(t, c, leader)
	refused(c.URL(next))
	restartAndCatchUp(t, c, leader, next)
	mustOK(t, ctx, f.writer, "PUT", c.URL(leader)+"/v1/kv/app/jobs/j3", `{"value":"x"}`) // the fifth node
	status, reply := sendAs(t, ctx, f.writer, "PUT", c.URL(leader)+"/v1/kv/app/jobs/j4", `{"value":"x"}`)
	if status != http.StatusInsufficientStorage {
		t.Errorf("a sixth node: %d %s", status, reply)
	}
	var st api.AuthStatus
	if err := json.Unmarshal(mustOK(t, ctx, f.root, "GET", c.URL(leader)+"/v1/auth", ""), &st); err != nil {
		t.Fatal(err)
	}
	want := api.AuthQuota{Prefix: "/app/jobs", MaxNodes: 5, MaxBytes: 100, Nodes: 5, Bytes: 31}
	if len(st.Quotas) != 1 || !reflect.DeepEqual(st.Quotas[0], want) {
		t.Errorf("quotas %+v, want %+v", st.Quotas, want)
	}
	if status, _ := sendAs(t, ctx, f.writer, "POST", f.base+"/v1/auth", `{"action":"quota_clear","prefix":"/app/jobs"}`); status != http.StatusForbidden {
		t.Errorf("a writer clearing a quota: %d", status)
	}
}
