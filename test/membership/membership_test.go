package membership

import (
	"context"
	"flag"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/check/linearize"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the workload's clients (0: random)")

// snapshotCount is small so that the log is compacted long before the
// learner joins: it can only catch up by snapshot.
const snapshotCount = 20

// TestMembershipUnderLoad: 3 voters under a Porcupine-checked workload; n4
// is added as a learner, catches up by snapshot, serves linearizable reads
// (in the checked history) and stale reads (read-your-writes checked), is
// promoted; the leader is removed (it hands over first, then exits 0);
// leadership is transferred to n4. The history must be linearizable.
func TestMembershipUnderLoad(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	c := proccluster.Start(t, proccluster.Options{Nodes: 3, SnapshotCount: snapshotCount})
	first := c.WaitLeader(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := client.New(client.Config{Endpoints: c.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	w := newWorkload(c.URLs())
	w.run(4, seed)
	defer w.halt()
	waitApplied(t, c.Members[first].ClientURL, 10*snapshotCount, 30*time.Second)

	// n4 joins as a learner: added first, then started empty.
	var initial []string
	for _, m := range c.Members {
		initial = append(initial, m.Name+"="+m.PeerAddr)
	}
	n4 := newJoiner(t, "n4")
	if _, err := admin.AddMember(ctx, client.AddMemberRequest{Name: "n4", PeerURL: n4.peerAddr, ClientURL: n4.clientURL, Learner: true}); err != nil {
		t.Fatalf("add n4 as a learner: %v", err)
	}
	n4.start(t, proccluster.Build(t), strings.Join(initial, ","), "--snapshot-count", "20", "--tick", "50ms")
	commit := status(t, c.Members[first].ClientURL).CommitIndex
	waitApplied(t, n4.clientURL, commit, 30*time.Second)
	if role := status(t, n4.clientURL).Role; role != "learner" {
		t.Fatalf("n4 is %q, want learner", role)
	}
	if !strings.Contains(n4.log(), "installed snapshot from leader") {
		t.Errorf("n4 caught up without installing a snapshot (log compacted every %d entries)", snapshotCount)
	}

	// The learner serves reads: linearizable ones in the checked history,
	// stale ones checked for read-your-writes.
	voters := func() []string { return c.URLs() }
	w.setEndpoints(append(c.URLs(), n4.clientURL))
	stale := startStaleReader(n4.clientURL, voters)
	if !testcluster.WaitFor(30*time.Second, func() bool {
		return w.served(n4.clientURL, linearize.Get) >= 50 && stale.reads.Load() >= 50
	}) {
		t.Fatalf("the learner served %d linearizable and %d stale reads in 30s", w.served(n4.clientURL, linearize.Get), stale.reads.Load())
	}
	learnerReads := w.served(n4.clientURL, linearize.Get)
	if anomalies := stale.halt(); len(anomalies) > 0 {
		t.Errorf("%d stale-read anomalies through the learner, first: %s", len(anomalies), anomalies[0])
	}

	if _, err := admin.WaitPromoteMember(ctx, "n4"); err != nil {
		t.Fatalf("promote n4: %v", err)
	}
	if !testcluster.WaitFor(10*time.Second, func() bool { return status(t, n4.clientURL).Role == "follower" }) {
		t.Fatalf("n4 is %q after its promotion", status(t, n4.clientURL).Role)
	}

	// Remove the current leader: it hands leadership over, then stops.
	leader := c.WaitLeader(20 * time.Second)
	name := c.Members[leader].Name
	w.setEndpoints(slices.Concat(without(c.URLs(), c.Members[leader].ClientURL), []string{n4.clientURL}))
	if err := admin.RemoveMember(ctx, name); err != nil {
		t.Fatalf("remove the leader %s: %v", name, err)
	}
	if !testcluster.WaitFor(20*time.Second, func() bool { return !c.Running(leader) }) {
		t.Fatalf("removed %s still runs", name)
	}
	if err := c.ExitError(leader); err != nil {
		t.Errorf("removed %s exited with %v, want status 0", name, err)
	}

	if _, err := admin.TransferLeader(ctx, "n4"); err != nil {
		t.Fatalf("transfer leadership to n4: %v", err)
	}
	if !testcluster.WaitFor(10*time.Second, func() bool { return status(t, n4.clientURL).Role == "leader" }) {
		t.Errorf("n4 is %q after the transfer, want leader", status(t, n4.clientURL).Role)
	}
	before, _, _ := w.rec.Counts()
	if !testcluster.WaitFor(20*time.Second, func() bool { after, _, _ := w.rec.Counts(); return after >= before+300 }) {
		t.Fatalf("the workload did not progress after the changes")
	}
	w.halt()

	checkMembers(t, ctx, admin, name)
	res, err := w.rec.Check(60 * time.Second)
	if err != nil {
		t.Fatalf("history not checkable: %v", err)
	}
	if !res.Linearizable() {
		t.Errorf("history not linearizable: %v", res)
	}
	t.Logf("TestMembershipUnderLoad seed %d: %v; %d linearizable reads through the learner, %d stale reads checked; 4 membership changes (add learner, promote, remove leader, transfer)",
		seed, res, learnerReads, stale.reads.Load())
}

// checkMembers checks the member table: n4 a voter, removed gone, 3 left.
func checkMembers(t *testing.T, ctx context.Context, admin *client.Client, removed string) {
	t.Helper()
	members, err := admin.Members(ctx)
	if err != nil {
		t.Fatalf("members: %v", err)
	}
	var names []string
	for _, m := range members.Members {
		names = append(names, m.Name)
		if m.Name == "n4" && m.Learner {
			t.Errorf("n4 is still a learner")
		}
	}
	if len(names) != 3 || !slices.Contains(names, "n4") || slices.Contains(names, removed) {
		t.Errorf("members %v: want 3 with n4 and without %s", names, removed)
	}
}

func without(urls []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(urls), func(u string) bool { return u == drop })
}

// status returns endpoint's GET /v1/status (zero Status if it fails).
func status(t *testing.T, endpoint string) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st api.Status
	_ = testcluster.Do(ctx, "GET", endpoint, "/v1/status", nil, nil, &st)
	return st
}

// waitApplied waits until endpoint has applied index.
func waitApplied(t *testing.T, endpoint string, index uint64, timeout time.Duration) {
	t.Helper()
	if !testcluster.WaitFor(timeout, func() bool { return status(t, endpoint).AppliedIndex >= index }) {
		t.Fatalf("%s did not apply index %d within %v (at %d)", endpoint, index, timeout, status(t, endpoint).AppliedIndex)
	}
}
