package testcluster

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
)

// waitFor polls cond until it holds or the timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitLeader waits until the running nodes that can reach each other agree
// on one leader that is itself running, and returns its index.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	leader := -1
	ok := c.AdvanceUntil(timeout, func() bool {
		leader = c.leader()
		return leader >= 0
	})
	if !ok {
		c.t.Fatalf("testcluster: no leader within %v: %s", timeout, c.describe())
	}
	return leader
}

// leader returns the index of a running node that believes it leads and that
// a majority of running nodes follows, or -1.
func (c *Cluster) leader() int {
	votes := map[uint64]int{}
	for _, i := range c.Running() {
		st := c.Nodes[i].Server.Status()
		if st.LeaderID != "" {
			votes[c.Nodes[i].statusLeader()]++
		}
	}
	for id, n := range votes {
		i := c.Index(id)
		if i >= 0 && c.Nodes[i].Server != nil && n > len(c.Nodes)/2 && c.Nodes[i].Server.Status().Role == "leader" {
			return i
		}
	}
	return -1
}

// LeaderIn returns the index of the leader that the given nodes agree on,
// within timeout, for a side of a partition.
func (c *Cluster) LeaderIn(timeout time.Duration, nodes ...int) int {
	c.t.Helper()
	leader := -1
	ok := c.AdvanceUntil(timeout, func() bool {
		leader = -1
		for _, i := range nodes {
			if c.Nodes[i].Server != nil && c.Nodes[i].Server.Status().Role == "leader" {
				leader = i
			}
		}
		if leader < 0 {
			return false
		}
		for _, i := range nodes {
			if c.Nodes[i].Server == nil || c.Nodes[i].statusLeader() != c.Nodes[leader].ID {
				return false
			}
		}
		return true
	})
	if !ok {
		c.t.Fatalf("testcluster: nodes %v agree on no leader within %v: %s", nodes, timeout, c.describe())
	}
	return leader
}

func (n *Node) statusLeader() uint64 {
	if n.Server == nil {
		return raft.None
	}
	return n.Server.LeaderID()
}

// WaitApplied waits until every running node has applied at least index.
func (c *Cluster) WaitApplied(index uint64, timeout time.Duration) {
	c.t.Helper()
	ok := waitFor(timeout, func() bool {
		for _, i := range c.Running() {
			if c.Nodes[i].Server.AppliedIndex() < index {
				return false
			}
		}
		return true
	})
	if !ok {
		c.t.Fatalf("testcluster: not every node applied %d within %v: %s", index, timeout, c.describe())
	}
}

// EnsureSame waits until every running node has applied the same index and
// fails the test unless their state hashes are equal (invariant 7).
func (c *Cluster) EnsureSame(timeout time.Duration) {
	c.t.Helper()
	var last string
	ok := waitFor(timeout, func() bool {
		var index, hash uint64
		for k, i := range c.Running() {
			h, idx := c.Nodes[i].Server.StateHash()
			if k == 0 {
				index, hash = idx, h
				continue
			}
			if idx != index {
				last = fmt.Sprintf("applied indexes differ: %s", c.describe())
				return false
			}
			if h != hash {
				last = fmt.Sprintf("state hashes differ at index %d: %s", index, c.describe())
				return false
			}
		}
		return true
	})
	if !ok {
		c.t.Fatalf("testcluster: replicas not identical within %v: %s", timeout, last)
	}
}

// describe summarises every node's view, for failure messages.
func (c *Cluster) describe() string {
	out := ""
	for _, n := range c.Nodes {
		if n.Server == nil {
			out += fmt.Sprintf("[%s down] ", n.Name)
			continue
		}
		st := n.Server.Status()
		h, idx := n.Server.StateHash()
		out += fmt.Sprintf("[%s %s term=%d lead=%s commit=%d applied=%d hash=%x] ",
			n.Name, st.Role, st.Term, st.LeaderID, st.CommitIndex, idx, h)
	}
	return out
}

// WaitAnnounced waits until every running node lists every running node
// with its client URL (each server announces its own in the replicated
// member table after it starts, a write of its own) and has applied all it
// knows committed. A test that measures the applied index to show that a
// request wrote nothing calls it first, so a late announcement does not
// land in the measurement.
func (c *Cluster) WaitAnnounced(timeout time.Duration) {
	c.t.Helper()
	ok := waitFor(timeout, func() bool {
		for _, i := range c.Running() {
			st := c.Nodes[i].Server.Status()
			if st.CommitIndex != st.AppliedIndex || !c.listsAllRunning(st.Members) {
				return false
			}
		}
		return true
	})
	if !ok {
		c.t.Fatalf("testcluster: members not all announced within %v: %s", timeout, c.describe())
	}
}

// listsAllRunning reports whether members hold every running node with a
// client URL.
func (c *Cluster) listsAllRunning(members []api.Member) bool {
	announced := map[string]bool{}
	for _, m := range members {
		if m.ClientURL != "" {
			announced[m.ID] = true
		}
	}
	for _, i := range c.Running() {
		if !announced[api.FormatID(c.Nodes[i].ID)] {
			return false
		}
	}
	return true
}
