package proccluster

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
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
	written, err := testcluster.Put(context.Background(), c.Members[next].ClientURL, "/lifecycle", "v1", "")
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
	if read, err := readStale(c.Members[leader].ClientURL, "/lifecycle", written.Index); err != nil || read.Value != "v1" {
		t.Fatalf("restarted member %s lacks /lifecycle: %q, %v", c.Members[leader].Name, read.Value, err)
	}
}

// readStale reads key on the member at base, a stale read served once the
// member has applied minIndex.
func readStale(base, key string, minIndex uint64) (api.Node, error) {
	q := url.Values{"consistency": {api.Stale}, "min_index": {strconv.FormatUint(minIndex, 10)}}
	var node api.Node
	err := testcluster.Do(context.Background(), http.MethodGet, base, "/v1/kv"+key, q, nil, &node)
	return node, err
}

// TestNetnsPartition: with members in namespaces, an isolated leader is
// replaced by the majority, and heals back into one cluster; the
// namespaces are gone afterwards.
func TestNetnsPartition(t *testing.T) {
	if err := NetnsAvailable(); err != nil {
		t.Skip(err)
	}
	var prefix string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{Nodes: 3, Netns: true})
		prefix = c.network.prefix
		leader := c.WaitLeader(30 * time.Second)
		if err := c.Partition([]int{leader}); err != nil {
			t.Fatal(err)
		}
		var others []int
		for i := range c.Members {
			if i != leader {
				others = append(others, i)
			}
		}
		next, err := c.FindLeader(30*time.Second, others...)
		if err != nil {
			t.Fatal(err)
		}
		if next == leader {
			t.Fatalf("isolated leader %d still leads the majority", leader)
		}
		if err := c.Heal(); err != nil {
			t.Fatal(err)
		}
		c.WaitLeader(30 * time.Second)
	})
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if prefix == "" || strings.Contains(string(out), prefix+"-") {
		t.Fatalf("namespaces %s* left behind:\n%s", prefix, out)
	}
}
