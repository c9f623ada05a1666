package recipes_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// Election timing: candidates' session timeout, and the allowance on top of
// it for a successor to lead and start its command (the session expiry
// check, one commit, one notification, the successor's join, the child's
// start and first write), on a loaded 2-core machine under -race. The bound
// is a liveness check (failover follows the session's expiry, not some
// later event), not a performance one: 2s of allowance was seen exceeded
// (4.7s in all) on a loaded machine, so it is three session timeouts.
const (
	candidateSessionTimeout = 2 * time.Second
	failoverAllowance       = 3 * candidateSessionTimeout
)

// TestElectionFailover runs three 'latchctl elect ROLE -- writer'
// candidates. Only the leader runs its writer, which writes once through
// the guard with the leader's fencing token. kill -9 of the leader's
// process group (latchctl and its writer, as if its machine died), twice:
// each time another candidate leads, with a higher token, and its writer's
// first write lands within the session timeout plus the allowance. An
// Observe in this process sees every leader, in order, with the same
// tokens.
func TestElectionFailover(t *testing.T) {
	latchctl := proccluster.BuildLatchctl(t)
	cluster := startCluster(t)
	c := newClient(t, cluster.URLs(), nil)
	res := newResource(t, true, nil)
	const role = "scheduler"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	observed := observe(ctx, recipe.NewElection(newSession(t, c, 10*time.Second), role))

	candidates := map[string]*group{}
	for _, name := range []string{"c1", "c2", "c3"} {
		candidates[name] = startGroup(t, "candidate "+name, writerEnvironment(name, res.URL, ""),
			latchctl, "--endpoints", endpointsFlag(cluster), "elect", role, "--value", name,
			"--session-timeout", candidateSessionTimeout.String(), "--", self(t))
	}
	isStart := func(w write) bool { return w.What == "start" }
	leaders := []write{res.waitFor(t, 20*time.Second, "from the first leader", isStart)}
	for round := range 2 {
		waitUntil(t, 20*time.Second, "every live candidate to join", func() bool {
			state, err := c.ElectionState(ctx, role)
			return err == nil && state.Candidates == 3-round
		})
		old := leaders[len(leaders)-1]
		candidates[old.Writer].signal(t, syscall.SIGKILL)
		killed := time.Now()
		next := res.waitFor(t, 20*time.Second, "from a new leader", func(w write) bool {
			return isStart(w) && !slices.ContainsFunc(leaders, func(l write) bool { return l.Writer == w.Writer })
		})
		took := time.Since(killed)
		t.Logf("kill -9 of leader %s (token %d): %s leads with token %d, writing after %v", old.Writer, old.Token, next.Writer, next.Token, took.Round(time.Millisecond))
		if next.Token <= old.Token || next.Status != http.StatusOK {
			t.Fatalf("new leader %s: token %d status %d, want a token above %d, accepted", next.Writer, next.Token, next.Status, old.Token)
		}
		if took > candidateSessionTimeout+failoverAllowance {
			t.Errorf("new leader after %v, over session timeout %v + %v", took, candidateSessionTimeout, failoverAllowance)
		}
		leaders = append(leaders, next)
	}

	last := leaders[len(leaders)-1]
	waitUntil(t, 10*time.Second, "Observe to see the last leader", func() bool {
		seen := observed.leaders()
		return len(seen) > 0 && seen[len(seen)-1].Value == last.Writer
	})
	var want, got []recipe.LeaderInfo
	for _, l := range leaders {
		want = append(want, recipe.LeaderInfo{Value: l.Writer, FencingToken: l.Token})
	}
	for _, info := range observed.leaders() {
		got = append(got, recipe.LeaderInfo{Value: info.Value, FencingToken: info.FencingToken})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Observe saw %+v, want every leader in order %+v", got, want)
	}
}

// observations collects what an Observe channel delivers.
type observations struct {
	mu   sync.Mutex // guards seen
	seen []recipe.LeaderInfo
}

// observe collects e.Observe(ctx) until ctx ends.
func observe(ctx context.Context, e *recipe.Election) *observations {
	o := &observations{}
	go func() {
		for info := range e.Observe(ctx) {
			o.mu.Lock()
			o.seen = append(o.seen, info)
			o.mu.Unlock()
		}
	}()
	return o
}

// leaders returns the leaders seen so far, without the moments of no
// candidate (zero LeaderInfo).
func (o *observations) leaders() []recipe.LeaderInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []recipe.LeaderInfo
	for _, info := range o.seen {
		if info.FencingToken != 0 {
			out = append(out, info)
		}
	}
	return out
}
