package proccluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testcluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuild()
	os.Exit(code)
}

// TestLifecycle: a paused leader is replaced, resumes as a follower; a
// killed member restarts from its data directory and has what was written.
func TestLifecycle(t *testing.T) {
	c := Start(t, Options{Nodes: 3, ElectionTicks: 10})
	leader := c.WaitLeader(30 * time.Second)
	if pid := c.Members[leader].PID(); pid <= 0 {
		t.Fatalf("leader %d has pid %d", leader, pid)
	}

	if !c.Pause(leader) {
		t.Fatalf("pause %d failed", leader)
	}
	next := c.WaitLeader(30 * time.Second)
	if next == leader {
		t.Fatalf("paused member %d still leads", leader)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	written, err := testcluster.Put(ctx, c.Members[next].ClientURL, "/lifecycle", "v1", "")
	if err != nil {
		t.Fatalf("put through new leader: %v", err)
	}
	c.Resume(leader)
	c.WaitLeader(30 * time.Second)

	c.Kill(leader)
	if c.Running(leader) || c.Members[leader].PID() != 0 {
		t.Fatalf("killed member %d still running", leader)
	}
	if c.ExitError(leader) == nil {
		t.Fatalf("SIGKILL left no exit error")
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(30 * time.Second)
	if !testcluster.WaitFor(20*time.Second, func() bool {
		n, err := staleGet(c.Members[leader].ClientURL, "/lifecycle", written.Index)
		return err == nil && n.Value == "v1"
	}) {
		t.Fatalf("restarted member %s lacks /lifecycle", c.Members[leader].Name)
	}
}

func staleGet(base, path string, minIndex uint64) (api.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return testcluster.Get(ctx, base, path, api.Stale)
}
