package chaos

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check"
)

// fault is one nemesis action: inject returns a heal function (or an error
// if the fault could not be made, e.g. no leader to kill).
type fault struct {
	name   string
	inject func(r *run) (heal func() error, err error)
}

func (r *run) faultKinds() []fault {
	out := []fault{
		{"kill-one", func(r *run) (func() error, error) { return r.kill(r.faults.IntN(len(r.cluster.Members))) }},
		{"kill-leader", func(r *run) (func() error, error) { return r.withLeader(r.kill) }},
		{"kill-minority", (*run).killMinority},
		{"kill-all", (*run).killAll},
		{"pause-leader", func(r *run) (func() error, error) { return r.withLeader(r.pause) }},
	}
	if r.cfg.UnsyncedCrashes {
		out = append(out, fault{"crash-unsynced-leader", (*run).crashUnsyncedLeader}, fault{"crash-unsynced-all", (*run).crashUnsyncedAll})
	}
	if r.cfg.LeaderTransfers {
		out = append(out, fault{"transfer-leader", func(r *run) (func() error, error) { return r.withLeader(r.transferLeader) }})
	}
	if r.cfg.MemberReplacements {
		out = append(out, fault{"replace-member", (*run).replaceMember})
	}
	if r.lockHolders != nil {
		out = append(out, fault{"pause-lock-holder", (*run).pauseLockHolder})
	}
	out = append(out, r.clockFaults()...)
	if r.cfg.DiskFaults {
		out = append(out, fault{"disk-full", (*run).fillDisk})
	}
	if r.cfg.Partitions && r.cluster.Netns() {
		out = append(out,
			fault{"partition-leader", func(r *run) (func() error, error) {
				return r.withLeader(func(l int) (func() error, error) { return r.partition([]int{l}) })
			}},
			fault{"partition-majority-minority", (*run).partitionMinority},
			fault{"partition-bridge", (*run).partitionBridge},
			fault{"partition-ring", (*run).partitionRing},
		)
		if r.cfg.OneWay {
			out = append(out, fault{"partition-one-way", (*run).partitionOneWay})
		}
	}
	return r.chosenFaults(out)
}

// chosenFaults keeps the faults Config.Faults names, or all when it names
// none. Naming no fault of the run is an anomaly; all are then used.
func (r *run) chosenFaults(all []fault) []fault {
	if len(r.cfg.Faults) == 0 {
		return all
	}
	var out []fault
	for _, f := range all {
		if slices.Contains(r.cfg.Faults, f.name) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		r.Anomaly("config: Config.Faults %v names no fault kind of this run; using all", r.cfg.Faults)
		return all
	}
	return out
}

// nemesis injects faults for d, each lasting a while, then heals all.
// With Config.MinAcked it goes on past d, up to Config.MaxDuration, until a
// fault began after that many operations were acknowledged: it waits for
// the acknowledgements, then injects one more fault.
func (r *run) nemesis(d time.Duration) {
	faults := r.faultKinds()
	start := time.Now()
	deadline, last := start.Add(d), start.Add(max(d, r.cfg.MaxDuration))
	ackedAtFault := int64(-1) // acknowledged operations when the latest fault began
	for {
		if !time.Now().Before(deadline) {
			if r.cfg.MinAcked == 0 || ackedAtFault >= int64(r.cfg.MinAcked) {
				return
			}
			if !r.waitAcked(int64(r.cfg.MinAcked), last) {
				r.Anomaly("liveness: %d operations acknowledged within %v, the run needs %d before a fault", r.AckedSoFar(), time.Since(start).Round(time.Second), r.cfg.MinAcked)
				return
			}
		}
		f := faults[r.faults.IntN(len(faults))]
		acked := r.AckedSoFar()
		heal, err := f.inject(r)
		if err != nil {
			r.Logf("chaos: %s: %v", f.name, err)
			time.Sleep(r.cfg.FaultEvery / 2)
			continue
		}
		ackedAtFault = acked
		r.Update(func(report *Report) { report.Faults[f.name]++ })
		hold := r.cfg.FaultEvery/2 + time.Duration(r.faults.IntN(int(r.cfg.FaultEvery)))
		r.Logf("chaos: %s for %v", f.name, hold)
		time.Sleep(hold)
		if err := heal(); err != nil {
			r.Anomaly("liveness: heal after %s: %v", f.name, err)
		}
		time.Sleep(r.cfg.FaultEvery / 2)
	}
}

// waitAcked waits until the workloads acknowledged n operations, or until
// the deadline; it reports whether they did.
func (r *run) waitAcked(n int64, deadline time.Time) bool {
	for r.AckedSoFar() < n {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// withLeader applies fn to the current leader.
func (r *run) withLeader(fn func(int) (func() error, error)) (func() error, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if leader := r.majorityLeader(); leader >= 0 {
			return fn(leader)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no leader followed by a majority within 10s:%s", r.describe())
}

// all returns every member's index.
func (r *run) all() []int {
	out := make([]int, len(r.cluster.Members))
	for i := range out {
		out[i] = i
	}
	return out
}

// minority returns a random minority of the members: (n-1)/2 of them,
// consecutive from a random first.
func (r *run) minority() []int {
	n := len(r.cluster.Members)
	first := r.faults.IntN(n)
	out := make([]int, (n-1)/2)
	for k := range out {
		out[k] = (first + k) % n
	}
	return out
}

// kill sends SIGKILL to member i; the heal restarts it from its data dir.
func (r *run) kill(i int) (func() error, error) {
	return r.killAllOf([]int{i})
}

// killMinority kills a minority (two of five members) at once.
func (r *run) killMinority() (func() error, error) {
	return r.killAllOf(r.minority())
}

// killAll kills every member at once (a whole-cluster power cut, as far as
// processes go); the heal restarts them all.
func (r *run) killAll() (func() error, error) {
	return r.killAllOf(r.all())
}

// killAllOf kills victims together; the heal restarts every one of them,
// joining the errors of those that would not start.
func (r *run) killAllOf(victims []int) (func() error, error) {
	for _, i := range victims {
		r.cluster.Kill(i)
	}
	return func() error {
		var errs []error
		for _, i := range victims {
			errs = append(errs, r.cluster.Restart(i))
		}
		return errors.Join(errs...)
	}, nil
}

// pause SIGSTOPs member i for longer than the election timeout (the fault
// lasts at least FaultEvery/2); the heal SIGCONTs it.
func (r *run) pause(i int) (func() error, error) {
	if !r.cluster.Pause(i) {
		return nil, fmt.Errorf("pause %d: not running", i)
	}
	return func() error {
		if !r.cluster.Resume(i) {
			return fmt.Errorf("resume %d: not running", i)
		}
		return nil
	}, nil
}

func (r *run) partition(sides ...[]int) (func() error, error) {
	if err := r.cluster.Partition(sides...); err != nil {
		return nil, err
	}
	return r.cluster.Heal, nil
}

// partitionMinority splits the members into a random minority and the rest.
func (r *run) partitionMinority() (func() error, error) {
	return r.partition(r.minority())
}

// partitionBridge: two halves that cannot see each other, and one member
// that sees both (a bridge).
func (r *run) partitionBridge() (func() error, error) {
	n := len(r.cluster.Members)
	bridge := r.faults.IntN(n)
	if err := r.cluster.Heal(); err != nil {
		return nil, err
	}
	var left, right []int
	for k := 1; k < n; k++ {
		i := (bridge + k) % n
		if k <= (n-1)/2 {
			left = append(left, i)
		} else {
			right = append(right, i)
		}
	}
	for _, a := range left {
		for _, b := range right {
			if err := r.cluster.Cut(a, b); err != nil {
				return nil, err
			}
		}
	}
	return r.cluster.Heal, nil
}

// partitionRing: every member hears only its two neighbours on a ring, so
// no member sees a majority directly (with five members each sees three of
// five, itself included).
func (r *run) partitionRing() (func() error, error) {
	n := len(r.cluster.Members)
	if err := r.cluster.Heal(); err != nil {
		return nil, err
	}
	ring := r.faults.Perm(n) // ring[k] neighbours ring[k-1] and ring[k+1]
	for a := range n {
		for b := a + 1; b < n; b++ {
			if d := b - a; d != 1 && d != n-1 {
				if err := r.cluster.Cut(ring[a], ring[b]); err != nil {
					return nil, err
				}
			}
		}
	}
	return r.cluster.Heal, nil
}

// partitionOneWay: the leader hears nobody (every packet to it dropped),
// while its own packets still leave.
func (r *run) partitionOneWay() (func() error, error) {
	return r.withLeader(func(leader int) (func() error, error) {
		if err := r.cluster.Heal(); err != nil {
			return nil, err
		}
		for i := range r.cluster.Members {
			if i != leader {
				if err := r.cluster.Block(i, leader); err != nil {
					return nil, err
				}
			}
		}
		return r.cluster.Heal, nil
	})
}

// majorityLeader returns the member that says it leads and that a majority
// of members name as leader, or -1. A member stuck apart does not stop the
// nemesis from finding the leader.
func (r *run) majorityLeader() int {
	votes := map[string]int{}
	leaderOf := map[string]int{}
	for _, i := range r.cluster.Live() {
		st, err := r.cluster.Status(i)
		if err != nil {
			continue
		}
		if st.LeaderID != "" {
			votes[st.LeaderID]++
		}
		if st.Role == "leader" && st.ID == st.LeaderID {
			leaderOf[st.ID] = i
		}
	}
	for id, n := range votes {
		if i, ok := leaderOf[id]; ok && n > len(r.cluster.Members)/2 {
			return i
		}
	}
	return -1
}

// transferLeader asks leader to hand leadership to another member (a
// membership change while clients run); there is nothing to heal.
func (r *run) transferLeader(leader int) (func() error, error) {
	n := len(r.cluster.Members)
	to := (leader + 1 + r.faults.IntN(n-1)) % n
	ctx, cancel := check.RequestContext()
	defer cancel()
	err := check.CallWith(ctx, r.harness, http.MethodPost, r.cluster.Members[leader].ClientURL, "/v1/cluster/leader", nil,
		&api.LeaderTransferRequest{To: r.cluster.Members[to].Name}, nil)
	if err != nil {
		return nil, fmt.Errorf("transfer leadership from %s to %s: %w", r.cluster.Members[leader].Name, r.cluster.Members[to].Name, err)
	}
	return func() error { return nil }, nil
}
