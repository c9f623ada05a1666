package compose

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// maxOutage bounds the longest stretch without an acknowledged write: a
// crashed leader costs an election (latchd's default 1s timeout) plus the
// client's failover, on a loaded 2-core machine.
const maxOutage = 15 * time.Second

// TestReplaceVoter starts the compose cluster, writes continuously, stops
// and removes the leader's container, removes it from the cluster, adds
// n4 as a learner, starts it, promotes it, transfers leadership to it, and
// checks that every acknowledged write is on every member.
func TestReplaceVoter(t *testing.T) {
	requireDocker(t)
	started := time.Now()
	p := newProject(t)
	buildImage(t, p.image())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	p.up()
	if !testcluster.WaitFor(60*time.Second, func() bool { return p.role(ctx, "o1") == "learner" && p.leaderName(ctx, "n1") != "" }) {
		t.Fatalf("the cluster did not form with o1 as a learner within 60s")
	}
	t.Logf("cluster up in %v", time.Since(started).Round(time.Millisecond))

	var endpoints []string
	for _, service := range []string{"n1", "n2", "n3", "o1", "n4"} {
		endpoints = append(endpoints, p.ports[service])
	}
	c, err := client.New(client.Config{Endpoints: endpoints, RequestTimeout: 3 * time.Second, DownTime: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := newWriter(c, 20*time.Millisecond)
	writeCtx, stopWriting := context.WithCancel(ctx)
	var writing sync.WaitGroup
	writing.Add(1)
	go func() { defer writing.Done(); w.run(writeCtx) }()
	defer func() { stopWriting(); writing.Wait() }()
	waitAcked(t, w, 50)

	victim := p.leaderName(ctx, "o1")
	survivor := otherVoter(victim)
	phase := w.mark()
	p.must(time.Minute, "stop", "-t", "5", victim)
	p.must(time.Minute, "rm", "-f", victim)
	waitAcked(t, w, 0)
	p.logPhase(t, "stopped and removed the leader's container "+victim, phase)

	phase = w.mark()
	p.mustLatchctl(survivor, "members", "remove", victim)
	p.mustLatchctl(survivor, "members", "add", "n4", "--peer-url", "n4:2380", "--client-url", "http://n4:2379", "--learner")
	p.startService("n4")
	p.mustLatchctl(survivor, "members", "promote", "n4", "--wait", "60s")
	if !testcluster.WaitFor(30*time.Second, func() bool { return p.role(ctx, "n4") == "follower" }) {
		t.Fatalf("n4 is %q after its promotion, want follower", p.role(ctx, "n4"))
	}
	p.logPhase(t, "removed "+victim+", added n4 as a learner, started and promoted it", phase)

	phase = w.mark()
	p.mustLatchctl(survivor, "leader", "transfer", "n4")
	if !testcluster.WaitFor(20*time.Second, func() bool { return p.leaderName(ctx, survivor) == "n4" }) {
		t.Fatalf("leadership did not move to n4")
	}
	waitAcked(t, w, 50)
	p.logPhase(t, "transferred leadership to n4", phase)
	stopWriting()
	writing.Wait()

	p.checkMembers(t, survivor, victim)
	acked, failures, longest, maxIndex := w.snapshot()
	t.Logf("%d writes acknowledged, %d failed, longest stretch without an acknowledged write %v",
		len(acked), failures, longest.Round(time.Millisecond))
	if longest > maxOutage {
		t.Errorf("the cluster was not writable for %v (> %v)", longest, maxOutage)
	}
	for _, service := range []string{"n1", "n2", "n3", "o1", "n4"} {
		if service != victim {
			p.checkAcked(t, ctx, service, acked, maxIndex)
		}
	}
	t.Logf("TestReplaceVoter: %d acknowledged writes on 4 members, 0 lost; 1 container removed, 4 membership changes; %v in all",
		len(acked), time.Since(started).Round(time.Second))
}

// otherVoter returns an original voter other than name.
func otherVoter(name string) string {
	for _, v := range []string{"n1", "n2", "n3"} {
		if v != name {
			return v
		}
	}
	return ""
}

// waitAcked waits until the writer has n more acknowledged writes (n == 0:
// one more), failing the test after maxOutage without progress.
func waitAcked(t *testing.T, w *writer, n int) {
	t.Helper()
	want := w.ackedCount() + max(n, 1)
	if !testcluster.WaitFor(maxOutage+time.Duration(n)*100*time.Millisecond, func() bool { return w.ackedCount() >= want }) {
		t.Fatalf("writes did not progress: still below %d acknowledged", want)
	}
}

func (p *project) logPhase(t *testing.T, what string, phase func() (int, int)) {
	failed, acked := phase()
	t.Logf("%s: %d writes failed meanwhile (%d acknowledged so far)", what, failed, acked)
}

func (p *project) mustLatchctl(service string, args ...string) string {
	p.t.Helper()
	out, err := p.latchctl(service, args...)
	if err != nil {
		p.t.Fatalf("latchctl %s: %v", strings.Join(args, " "), err)
	}
	p.t.Logf("latchctl %s: %s", strings.Join(args, " "), strings.TrimSpace(out))
	return out
}

// role returns service's role, or "" when it does not answer.
func (p *project) role(ctx context.Context, service string) string {
	st, err := p.status(ctx, service)
	if err != nil {
		return ""
	}
	return st.Role
}

// checkMembers checks the member table after the replacement.
func (p *project) checkMembers(t *testing.T, survivor, victim string) {
	t.Helper()
	out := p.mustLatchctl(survivor, "-o", "json", "members", "list")
	var members api.Members
	if err := json.Unmarshal([]byte(out), &members); err != nil {
		t.Fatalf("members list -o json: %v: %q", err, out)
	}
	roles := map[string]bool{} // name -> learner
	for _, m := range members.Members {
		roles[m.Name] = m.Learner
	}
	learner, ok := roles["n4"]
	if len(roles) != 4 || !ok || learner || !roles["o1"] {
		t.Errorf("members %+v: want n4 a voter, o1 a learner, 4 members", members.Members)
	}
	if _, ok := roles[victim]; ok {
		t.Errorf("removed %s is still listed", victim)
	}
}

// checkAcked waits until service has applied maxIndex and reads every
// acknowledged key there (stale reads: its own state).
func (p *project) checkAcked(t *testing.T, ctx context.Context, service string, acked map[string]string, maxIndex uint64) {
	t.Helper()
	applied := func() bool { st, err := p.status(ctx, service); return err == nil && st.AppliedIndex >= maxIndex }
	if !testcluster.WaitFor(30*time.Second, applied) {
		t.Fatalf("%s did not apply index %d", service, maxIndex)
	}
	c, err := client.New(client.Config{Endpoints: []string{p.ports[service]}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	missing := 0
	for key, value := range acked {
		node, err := c.Get(ctx, key, client.Stale())
		if err != nil || node.Value != value {
			if missing++; missing <= 5 {
				t.Errorf("%s: acknowledged %s=%s: got %+v, %v", service, key, value, node, err)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%s: %d of %d acknowledged writes missing", service, missing, len(acked))
	}
}
