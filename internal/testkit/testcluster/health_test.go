package testcluster

import (
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/server"
)

// healthOf returns, from node i's ClusterHealth, the member with raft id id.
func (c *Cluster) healthOf(i int, id uint64) api.MemberHealth {
	for _, m := range c.Nodes[i].Server.ClusterHealth().Members {
		if m.ID == api.FormatID(id) {
			return m
		}
	}
	c.t.Fatalf("member %s missing from %s's cluster health", api.FormatID(id), c.Nodes[i].Name)
	return api.MemberHealth{}
}

// reachableCount is how many members node i's ClusterHealth counts reachable.
func (c *Cluster) reachableCount(i int) int {
	n := 0
	for _, m := range c.Nodes[i].Server.ClusterHealth().Members {
		if m.Reachable {
			n++
		}
	}
	return n
}

// TestClusterHealthFromStatusReports runs in virtual time, so that the age
// of the last status report is exact: a member stays reachable while its
// latest report is at most three report intervals old, becomes unreachable
// with the age of that report once it is older, and reachable again once it
// restarts and reports; a member that just started has heard from nobody.
func TestClusterHealthFromStatusReports(t *testing.T) {
	c := New(t, 3, Options{Time: clock.NewFake(time.Unix(1_700_000_000, 0))})
	leader := c.WaitLeader(10 * time.Second)
	viewer := c.Others(leader)[0]
	down := c.Others(leader, viewer)[0]
	// A report is up to an interval old: the first ones left before the
	// election.
	leaderID := api.FormatID(c.Nodes[leader].ID)
	heard := c.AdvanceUntil(10*time.Second, func() bool {
		h := c.Nodes[viewer].Server.ClusterHealth()
		return c.reachableCount(viewer) == 3 && h.LeaderID == leaderID && c.healthOf(viewer, c.Nodes[down].ID).LeaderID == leaderID
	})
	if !heard {
		t.Fatalf("%s never heard from every member with %s leading: %+v", c.Nodes[viewer].Name, leaderID, c.Nodes[viewer].Server.ClusterHealth())
	}
	if h := c.healthOf(viewer, c.Nodes[leader].ID); h.Role != "leader" || h.LeaderID != leaderID || h.AppliedIndex == 0 || h.Term == 0 {
		t.Fatalf("the leader as %s hears it: %+v; want it leading with a term and an applied index", c.Nodes[viewer].Name, h)
	}

	// The last report of down left at most one interval before it stopped.
	c.Stop(down)
	c.Advance(server.StatusReportInterval*2 - 100*time.Millisecond)
	if h := c.healthOf(viewer, c.Nodes[down].ID); !h.Reachable {
		t.Fatalf("%s unreachable %v after it stopped, before its last report is three intervals old: %+v", c.Nodes[down].Name, 2*server.StatusReportInterval, h)
	}
	c.Advance(server.StatusReportInterval * 3)
	h := c.healthOf(viewer, c.Nodes[down].ID)
	age, err := time.ParseDuration(strings.TrimPrefix(h.Error, "no status report for "))
	if h.Reachable || err != nil || age <= 3*server.StatusReportInterval || age > 4900*time.Millisecond || h.Role != "" || h.AppliedIndex != 0 {
		t.Fatalf("%s 4.9s after it stopped: %+v; want unreachable, no status, and an error with an age from 3s to 4.9s", c.Nodes[down].Name, h)
	}
	if c.healthOf(viewer, c.Nodes[leader].ID).Reachable != true {
		t.Fatalf("the leader, still running, is unreachable: %+v", c.Nodes[viewer].Server.ClusterHealth())
	}

	c.Restart(down)
	if !c.AdvanceUntil(10*time.Second, func() bool { return c.healthOf(viewer, c.Nodes[down].ID).Reachable }) {
		t.Fatalf("%s never reachable again after its restart: %+v", c.Nodes[down].Name, c.healthOf(viewer, c.Nodes[down].ID))
	}

	// Just started, before any report could arrive, viewer has heard from
	// nobody but itself.
	c.Stop(viewer)
	c.Restart(viewer)
	for _, m := range c.Nodes[viewer].Server.ClusterHealth().Members {
		self := m.ID == api.FormatID(c.Nodes[viewer].ID)
		if m.Reachable != self || (!self && !strings.HasPrefix(m.Error, "never heard from")) {
			t.Fatalf("member %+v as %s sees it right after its start: want only itself reachable, the others never heard from", m, c.Nodes[viewer].Name)
		}
	}
}
