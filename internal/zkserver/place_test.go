package zkserver

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// deferredProposals sums latch_raft_deferred_proposals_total over its
// series on the member at url.
func deferredProposals(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "latch_raft_deferred_proposals_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		sum += v
	}
	if err := lines.Err(); err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return sum
}

// TestQueuePlaceIsDeferred: a create of an ephemeral sequential node under
// a parent that has children already (a lock or election recipe's place
// behind another) is proposed deferred, to leave with the next write on
// its member; the first such node under an empty parent, a persistent
// sequential or a plain ephemeral node, and a multi are proposed at once.
// Every create succeeds as ZooKeeper's would.
func TestQueuePlaceIsDeferred(t *testing.T) {
	c := startZK(t, 3, Config{})
	first, _ := connect(t, c.addrs[:1], 10*time.Second)
	second, _ := connect(t, c.addrs[:1], 10*time.Second)
	acl := zk.WorldACL(zk.PermAll)
	steps := []struct {
		what   string
		create func() error
		want   float64 // deferred proposals counted by the members after the step
	}{
		{"the queue's parent", func() error { _, err := first.Create("/q", nil, 0, acl); return err }, 0},
		{"the first place, in an empty queue", func() error {
			_, err := first.Create("/q/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
			return err
		}, 0},
		{"a place behind it", func() error {
			_, err := second.Create("/q/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
			return err
		}, 1},
		{"a persistent sequential node", func() error { _, err := second.Create("/q/seq-", nil, zk.FlagSequence, acl); return err }, 1},
		{"a plain ephemeral node", func() error { _, err := second.Create("/q/eph", nil, zk.FlagEphemeral, acl); return err }, 1},
		{"a place in a multi", func() error {
			_, err := second.Multi(&zk.CreateRequest{Path: "/q/lock-", Acl: acl, Flags: zk.FlagEphemeral | zk.FlagSequence})
			return err
		}, 1},
	}
	for _, st := range steps {
		if err := st.create(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		got := 0.0 // over the members: a follower's place waits at the leader
		for i := range c.Nodes {
			got += deferredProposals(t, c.URL(i))
		}
		if got != st.want {
			t.Fatalf("after %s: %v deferred proposals, want %v", st.what, got, st.want)
		}
	}
	children, _, err := first.Children("/q")
	if err != nil || len(children) != 5 {
		t.Fatalf("children of /q: %v, %v; want the five nodes made", children, err)
	}
}
