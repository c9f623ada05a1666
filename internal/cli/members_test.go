package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestMembershipCommands drives the operator flow against an in-process
// cluster of real servers: add a learner, promote it once caught up, move
// leadership to it, remove the old leader; and the refusals' exit codes.
func TestMembershipCommands(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{SnapshotEvery: 20})
	leader := c.WaitLeader(10 * time.Second)
	env := map[string]string{EnvEndpoints: strings.Join(c.URLs(), ",")}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last api.Node
	for i := range 50 {
		n, err := testcluster.Put(ctx, c.URL(leader), fmt.Sprintf("/ops/k%d", i%5), fmt.Sprint(i), "")
		if err != nil {
			t.Fatal(err)
		}
		last = n
	}

	run := func(want int, args ...string) result {
		t.Helper()
		got := latchctl(t, env, "", args...)
		if got.code != want {
			t.Fatalf("latchctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got.code, want, got.stdout, got.stderr)
		}
		return got
	}
	got := run(ExitOK, "members", "add", "n4", "--peer-url", c.PeerURL("n4"), "--learner")
	if !strings.Contains(got.stdout, "added n4") {
		t.Errorf("add output %q", got.stdout)
	}
	run(ExitPrecondition, "members", "add", "n4", "--peer-url", "elsewhere:2380")
	run(ExitOther, "members", "add", "n5") // no --peer-url
	n4 := c.AddNode("n4")
	c.WaitApplied(last.Index, 20*time.Second)

	var members api.Members
	decode(t, run(ExitOK, "members", "list", "-o", "json").stdout, &members)
	if role := roleOf(members, "n4"); role != "learner" {
		t.Fatalf("n4 listed as %q, want learner: %+v", role, members)
	}
	run(ExitOK, "members", "promote", "n4", "--wait", "20s")
	run(ExitOK, "members", "promote", "n4") // already a voter: promotion is idempotent
	run(ExitOK, "leader", "transfer", "n4")
	if l := c.WaitLeader(10 * time.Second); l != n4 {
		t.Fatalf("leader is %s after the transfer, want n4", c.Nodes[l].Name)
	}
	run(ExitNotFound, "members", "remove", "n9")
	run(ExitOK, "members", "remove", c.Nodes[leader].Name)
	decode(t, run(ExitOK, "members", "-o", "json").stdout, &members)
	if len(members.Members) != 3 || roleOf(members, c.Nodes[leader].Name) != "" || roleOf(members, "n4") != "voter" {
		t.Fatalf("members after the changes: %+v", members)
	}
	if text := run(ExitOK, "members").stdout; !strings.Contains(text, "n4") || !strings.Contains(text, "voter") {
		t.Errorf("members table %q", text)
	}
}

func decode(t *testing.T, text string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(text), v); err != nil {
		t.Fatalf("decode %q: %v", text, err)
	}
}

// roleOf returns "voter", "learner" or "" (absent) for name.
func roleOf(members api.Members, name string) string {
	for _, m := range members.Members {
		if m.Name == name {
			return memberRole(m)
		}
	}
	return ""
}
