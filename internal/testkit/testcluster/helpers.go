package testcluster

import (
	"context"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// snapDir is where a node keeps its snapshot files (server: DataDir/snap).
const snapDir = "/data/snap"

// SnapshotIndexes lists the indexes of the main group's snapshot files on
// node i's disk, ascending. Files are named "<group %016x>-<index %016x>.snap".
func (c *Cluster) SnapshotIndexes(i int) []uint64 {
	names, err := c.Nodes[i].FS.List(snapDir)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, name := range names {
		base, ok := strings.CutSuffix(path.Base(name), ".snap")
		if !ok {
			continue
		}
		group, index, ok := strings.Cut(base, "-")
		if !ok {
			continue
		}
		g, err1 := strconv.ParseUint(group, 16, 64)
		idx, err2 := strconv.ParseUint(index, 16, 64)
		if err1 == nil && err2 == nil && g == 1 {
			out = append(out, idx)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// Status is node i's own view of the cluster (it must be running).
func (c *Cluster) Status(i int) api.Status { return c.Nodes[i].Server.Status() }

// Others returns the indexes of every node but the given ones.
func (c *Cluster) Others(except ...int) []int {
	var out []int
	for i := range c.Nodes {
		skip := false
		for _, e := range except {
			skip = skip || e == i
		}
		if !skip {
			out = append(out, i)
		}
	}
	return out
}

// IDs returns the raft ids of the given nodes, for Net.Partition.
func (c *Cluster) IDs(nodes ...int) []uint64 {
	out := make([]uint64, len(nodes))
	for k, i := range nodes {
		out[k] = c.Nodes[i].ID
	}
	return out
}

// URLs returns every node's client URL. They stay valid across restarts, so
// client goroutines may keep the slice while the test crashes nodes (reading
// Node fields from them would race with Crash and Restart).
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.URL
	}
	return out
}

// LocalGet reads path from node i's applied state without going through HTTP
// (consistency stale): what this replica holds.
func (c *Cluster) LocalGet(i int, p string) (api.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Nodes[i].Server.Get(ctx, p, server.ReadOptions{Consistency: api.Stale})
}

// SessionByHandle returns the id of the live session whose public handle is
// handle (as a read shows it), looked up in node i's applied state: the
// in-process shortcut a test needs to act on a session it did not create.
// The API itself never maps a handle back to an id.
func (c *Cluster) SessionByHandle(i int, handle string) (string, bool) {
	h, err := api.ParseID(handle)
	if err != nil {
		return "", false
	}
	id, ok := c.Nodes[i].Server.SessionByHandle(h)
	if !ok {
		return "", false
	}
	return api.FormatID(id), true
}

// WaitFor polls cond every few milliseconds until it holds or timeout
// passes, and reports whether it held.
func WaitFor(timeout time.Duration, cond func() bool) bool { return waitFor(timeout, cond) }
