package proccluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
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
	var written api.Node
	err := call(http.MethodPut, c.Members[next].ClientURL+"/v1/kv/lifecycle", api.PutRequest{Value: "v1"}, &written)
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
	url := fmt.Sprintf("%s/v1/kv/lifecycle?consistency=stale&min_index=%d", c.Members[leader].ClientURL, written.Index)
	var read api.Node
	if err := call(http.MethodGet, url, nil, &read); err != nil || read.Value != "v1" {
		t.Fatalf("restarted member %s lacks /lifecycle", c.Members[leader].Name)
	}
}

// call sends one JSON request and decodes a 200 reply.
func call(method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
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
