package chaos

import (
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/check"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// Config is one run of the suite.
type Config struct {
	Seed     uint64        // drives the fault schedule and the workloads' choices
	Duration time.Duration // time under faults, before healing
	// MinAcked makes the time under faults last past Duration until a
	// fault began after at least this many operations were acknowledged
	// (the set workload counts; check.Run.NoteAcked), so that what a
	// check needs does not depend on how fast the machine is. The run
	// waits for them with no fault in progress, up to MaxDuration, and
	// reports a liveness anomaly if they do not come.
	MinAcked int
	// MaxDuration bounds the time under faults with MinAcked; default
	// Duration (MinAcked then only checks).
	MaxDuration time.Duration
	Nodes       int // cluster size; default 5
	// Shards is latchd's --shards for every member (default 1).
	Shards int
	// FaultEvery is the mean time between the start of faults; default 3s.
	FaultEvery time.Duration
	// Partitions enables partitions; it needs network namespaces.
	Partitions bool
	// OneWay adds the one-way partition (every packet to the leader
	// dropped) to the partitions. Off by default (the soak turns it on); it
	// exposed a member staying cut off after the heal, since fixed (see
	// docs/correctness.md).
	OneWay bool
	// ExtraFlags are passed to every latchd (planted bugs).
	ExtraFlags []string
	// UncheckedGuard replaces the lock and lockproc workloads' fencing
	// guards by one that accepts every token (planted bug (c)).
	UncheckedGuard bool
	// DropWatchEvent plants a bug in the watch workload's reader: it notes
	// one event's index and loses the event.
	DropWatchEvent bool
	// WatchWithoutKnownIndex plants a bug in the watch workload: watchers
	// re-register on another member without known_index.
	WatchWithoutKnownIndex bool
	// LeaderTransfers adds leader transfer (POST /v1/cluster/leader) to the
	// faults, counted as membership changes.
	LeaderTransfers bool
	// MemberReplacements adds the replacement of a member (remove it, then
	// add a new one as a learner and promote it) to the faults.
	MemberReplacements bool
	// UnsyncedCrashes adds crashes that lose unsynced data (SIGKILL, then
	// the data directory cut back to its last fsync, by a sync journal each
	// member keeps) of the leader and of all members at once.
	UnsyncedCrashes bool
	// DiskFaults adds the disk-full fault (disk.go): every member's data
	// directory is its own small tmpfs, which the fault fills. It needs
	// root.
	DiskFaults bool
	// ClockFaults adds the clock faults (clock.go): a leader's clock at 2x
	// or 0.5x, a member's wall clock jumping an hour, the lock workload's
	// clients on a slow clock.
	ClockFaults bool
	// Workloads to run; all when empty: internal/check's "register", "set",
	// "lock", "ephemeral", and this package's "lockproc" and "watch".
	Workloads []string
	// Faults are the fault kinds the nemesis draws from; all of the run's
	// when empty (see faultKinds for the names).
	Faults []string
	// TLS serves both ports of every member over TLS, client certificates
	// required (proccluster Options.TLS); the workloads use TLS too.
	TLS bool
	// Auth enables auth before the workloads start (security.go): each kind
	// of client logs in as its own non-root user with grants on its
	// prefixes only. It needs TLS.
	Auth bool
	// ZK gives every member a ZooKeeper listener and adds the zk workload
	// (zk.go): go-zookeeper's lock recipe, fenced.
	ZK bool
	// ZKAuth makes the zk workload's clients send digest credentials (its
	// own user) under Auth; without it, a run with Auth and ZK leaves the
	// zk workload out (see TestSoak).
	ZKAuth bool
}

const (
	tick          = 50 * time.Millisecond
	electionTicks = 10
	// sessionTimeout is the lock and session workloads' session timeout.
	sessionTimeout = check.SessionTimeout
)

// Report is what a run found (the summary line of docs/correctness.md);
// the workloads shared with latchctl check fill it too.
type Report = check.Report

// run is the state of one Run: the workloads' shared state (check.Run)
// and the nemesis's.
type run struct {
	*check.Run
	cfg     Config
	cluster *proccluster.Cluster
	t       testing.TB

	// tokens are the login tokens of the workloads' users (Config.Auth),
	// by user name; set before the workloads start, read-only after.
	tokens map[string]string
	// tlsConfig is the harness's TLS configuration (Config.TLS), else nil;
	// harness is its client for admin calls (test-user's certificate).
	tlsConfig *tls.Config
	harness   *http.Client

	faults *rand.Rand // the fault schedule: used by the nemesis goroutine only, so a seed gives one schedule

	replaced int // members replaced so far (names new members); nemesis goroutine only

	// lockHolders is the lockproc workload, whose client processes the
	// pause-lock-holder fault stops; set by its start, nil without it.
	lockHolders *lockProcs
	// lockSkewer is the lock workload, whose clients' clocks the
	// clock-skew-lock-client fault skews; nil without it.
	lockSkewer check.ClientSkewer
}

// target is a proccluster as the workloads see it.
type target struct{ cluster *proccluster.Cluster }

func (t target) URLs() []string { return t.cluster.URLs() }

func (t target) Members() []check.Member {
	members := make([]check.Member, len(t.cluster.Members))
	for i, m := range t.cluster.Members {
		members[i] = check.Member{Name: m.Name, ClientURL: m.ClientURL}
	}
	return members
}

// workload is one kind of client activity and its checker: the shared
// ones of internal/check, and this package's own (lockproc, watch).
type workload interface {
	start(r *run)       // launch goroutines counted in r.Workers; they end when r.Stopping closes
	check(r *run) error // after healing and quiescence: add findings to r.Report
}

// shared is a workload of internal/check.
type shared struct{ check.Workload }

func (w shared) start(r *run)       { w.Start(r.Run) }
func (w shared) check(r *run) error { return w.Check(r.Run) }

// Run executes one run and returns its report; t is only used to start and
// clean up the cluster and to log.
func Run(t testing.TB, cfg Config) Report {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 5
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = 3 * time.Second
	}
	report := Report{Seed: cfg.Seed, Runs: 1, Faults: map[string]int{}}
	if cfg.DiskFaults {
		cfg.ExtraFlags = append(slices.Clone(cfg.ExtraFlags), diskFlags()...)
	}
	cluster := proccluster.Start(t, proccluster.Options{
		Nodes: cfg.Nodes, Tick: tick, ElectionTicks: electionTicks, MinSessionTimeout: time.Second,
		SnapshotCount: 500, Shards: cfg.Shards, ExtraFlags: cfg.ExtraFlags, Netns: cfg.Partitions, SyncJournal: cfg.UnsyncedCrashes,
		ClockControl: cfg.ClockFaults, TLS: cfg.TLS || cfg.Auth, ZK: cfg.ZK, DiskSize: diskSizeOf(cfg),
	})
	r := &run{
		Run: check.NewRun(check.Options{Seed: cfg.Seed, Target: target{cluster}, Logf: t.Logf}, &report),
		cfg: cfg, cluster: cluster, t: t,
		faults: rand.New(rand.NewPCG(cfg.Seed, 0x6661756c74)),
	}
	cluster.WaitLeader(60 * time.Second)
	if err := r.secure(); err != nil {
		t.Fatalf("chaos: set up TLS and auth: %v", err)
	}
	workloads := r.workloads()
	for _, w := range workloads {
		w.start(r)
	}
	r.nemesis(cfg.Duration)
	r.Stop()
	r.quiesce()
	for _, w := range workloads {
		if err := w.check(r); err != nil {
			r.Anomaly("checker could not run: %v", err)
		}
	}
	return report
}

// workloadNames are the suite's workloads: internal/check's and its own
// (zk only with Config.ZK).
var workloadNames = append(slices.Clone(check.WorkloadNames), "lockproc", "watch")

func (r *run) workloads() []workload {
	names := r.cfg.Workloads
	if len(names) == 0 {
		names = workloadNames
		if r.cfg.ZK {
			names = append(slices.Clone(names), "zk")
		}
	}
	if !r.cfg.ZK || (r.cfg.Auth && !r.cfg.ZKAuth) { // no ZooKeeper port, or one that refuses them
		names = slices.DeleteFunc(slices.Clone(names), func(name string) bool { return name == "zk" })
	}
	var out []workload
	for _, name := range names {
		switch name {
		case "lockproc":
			out = append(out, &lockProcs{unchecked: r.cfg.UncheckedGuard})
		case "watch":
			out = append(out, newWatches(r.cfg))
		case "zk":
			out = append(out, &zkLocks{unchecked: r.cfg.UncheckedGuard})
		default:
			w, err := check.NewWorkload(name, r.cfg.UncheckedGuard)
			if err != nil {
				r.Anomaly("config: %v", err)
				continue
			}
			if skewer, ok := w.(check.ClientSkewer); ok {
				r.lockSkewer = skewer
			}
			out = append(out, shared{w})
		}
	}
	return out
}

// quiesce waits until every member runs, one leader is agreed, and all
// members applied the same index.
func (r *run) quiesce() {
	for i, m := range r.cluster.Members {
		if !r.cluster.Running(i) {
			r.Anomaly("liveness: %s exited on its own (%v); restarted for the checks", m.Name, r.cluster.ExitError(i))
			if err := r.cluster.Restart(i); err != nil {
				r.Anomaly("restart %s: %v", m.Name, err)
			}
		}
	}
	if r.settle(30 * time.Second) {
		return
	}
	r.Anomaly("liveness: cluster did not quiesce (one leader, equal applied index) within 30s after healing:%s", r.describe())
	// A member stuck behind is restarted, as an operator would, so the
	// safety checks can still look at every replica.
	for _, i := range r.lagging() {
		if err := r.cluster.Restart(i); err != nil {
			r.Anomaly("restart %s: %v", r.cluster.Members[i].Name, err)
		}
	}
	if !r.settle(60 * time.Second) {
		r.Anomaly("liveness: cluster did not quiesce after restarting the members behind:%s", r.describe())
	}
}

// settle waits until one leader is agreed by all and all applied the same index.
func (r *run) settle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := r.cluster.FindLeader(5*time.Second, r.cluster.Live()...); err == nil && r.sameApplied() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// lagging returns the members that do not answer or applied less than the most advanced.
func (r *run) lagging() []int {
	var most uint64
	applied := make([]uint64, len(r.cluster.Members))
	for i := range r.cluster.Members {
		if st, err := r.cluster.Status(i); err == nil {
			applied[i] = st.AppliedIndex
			most = max(most, st.AppliedIndex)
		}
	}
	var out []int
	for i, a := range applied {
		if a < most {
			out = append(out, i)
		}
	}
	return out
}

func (r *run) sameApplied() bool {
	var applied uint64
	for i := range r.cluster.Members {
		st, err := r.cluster.Status(i)
		if err != nil || (i > 0 && st.AppliedIndex != applied) || st.CommitIndex != st.AppliedIndex {
			return false
		}
		applied = st.AppliedIndex
	}
	return true
}

// describe lists what every member says about itself.
func (r *run) describe() string {
	var b strings.Builder
	for i, m := range r.cluster.Members {
		st, err := r.cluster.Status(i)
		if err != nil {
			fmt.Fprintf(&b, " %s: %v;", m.Name, err)
			continue
		}
		fmt.Fprintf(&b, " %s: %s term %d applied %d;", m.Name, st.Role, st.Term, st.AppliedIndex)
	}
	return b.String()
}
