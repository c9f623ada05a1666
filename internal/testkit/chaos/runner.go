package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// Config is one run of the suite.
type Config struct {
	Seed     uint64        // drives the fault schedule and the workloads' choices
	Duration time.Duration // time under faults, before healing
	Nodes    int           // cluster size; default 5
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
	// Workloads to run; all when empty: "register", "lock", "lockproc", "sequence", "session", "watch".
	Workloads []string
	// Faults are the fault kinds the nemesis draws from; all of the run's
	// when empty (see faultKinds for the names).
	Faults []string
}

const (
	tick          = 50 * time.Millisecond
	electionTicks = 10
	// sessionTimeout is the lock and session workloads' session timeout.
	sessionTimeout = 2 * time.Second
)

// Report is what a run found. Anomalies is empty on a pass.
type Report struct {
	Seed        uint64
	Runs        int
	Operations  int // history operations checked by all checkers
	Linearized  int // of which in the Porcupine history
	Unknown     int // Porcupine verdicts that were Unknown (a failure)
	Faults      map[string]int
	Acked       int // acknowledged creates checked on every replica
	Lost        int // of which missing somewhere
	StaleWrites int // guard-accepted writes below an accepted token
	Overlaps    int // stale-token writes the guard refused (overlapping holders caught)
	Leaked      int // ephemeral nodes left after their session ended
	Early       int // ephemeral nodes gone while their session was alive
	// W: watch events checked, watcher sessions, reconnects (with known_index),
	// and the anomalies found.
	WatchEvents, WatchSessions, WatchReconnects                 int
	WatchGaps, WatchDuplicates, WatchReorders, WatchUncommitted int
	// Lock client processes stopped while holding (pause-lock-holder) until
	// the lock moved on: how many, once resumed, wrote again with their old
	// token, and how many of those writes the guard refused.
	ResumedStaleWrites, ResumedRefused int
	// Members crashed losing unsynced data, and what their cuts dropped.
	UnsyncedCrashes, UnsyncedFiles int
	UnsyncedBytes                  int64
	Anomalies                      []string
}

func (r *Report) anomaly(format string, args ...any) {
	r.Anomalies = append(r.Anomalies, fmt.Sprintf(format, args...))
}

// Merge adds other's figures to r.
func (r *Report) Merge(other Report) {
	r.Runs += other.Runs
	r.Operations += other.Operations
	r.Linearized += other.Linearized
	r.Unknown += other.Unknown
	if r.Faults == nil {
		r.Faults = map[string]int{}
	}
	for k, v := range other.Faults {
		r.Faults[k] += v
	}
	r.Acked += other.Acked
	r.Lost += other.Lost
	r.StaleWrites += other.StaleWrites
	r.Overlaps += other.Overlaps
	r.Leaked += other.Leaked
	r.Early += other.Early
	r.WatchEvents += other.WatchEvents
	r.WatchSessions += other.WatchSessions
	r.WatchReconnects += other.WatchReconnects
	r.WatchGaps += other.WatchGaps
	r.WatchDuplicates += other.WatchDuplicates
	r.WatchReorders += other.WatchReorders
	r.WatchUncommitted += other.WatchUncommitted
	r.ResumedStaleWrites += other.ResumedStaleWrites
	r.ResumedRefused += other.ResumedRefused
	r.UnsyncedCrashes += other.UnsyncedCrashes
	r.UnsyncedFiles += other.UnsyncedFiles
	r.UnsyncedBytes += other.UnsyncedBytes
	r.Anomalies = append(r.Anomalies, other.Anomalies...)
}

// Summary is the run's one-line summary (docs/correctness.md).
func (r *Report) Summary() string {
	verdict := "all linearizable"
	liveness := 0
	for _, a := range r.Anomalies {
		if strings.HasPrefix(a, "liveness:") {
			liveness++
		}
	}
	if len(r.Anomalies) > liveness {
		verdict = fmt.Sprintf("%d SAFETY ANOMALIES", len(r.Anomalies)-liveness)
	}
	kills := r.faultsNamed("kill-", "crash-unsynced-")
	partitions := r.faultsNamed("partition-")
	return fmt.Sprintf("seed %d: %d operations checked over %d runs: %s (%d Unknown), under %d partitions, "+
		"%d kill -9 (%d losing unsynced data, %d members crashed so: %d bytes and %d files dropped), %d SIGSTOPs (%d of the leader, %d of lock-holding client processes), %d membership changes (%d leader transfers, %d members replaced); "+
		"%d acknowledged writes lost of %d; %d stale-token writes accepted (%d overlapping holders caught by fencing; %d of %d resumed holder processes' stale writes refused); "+
		"%d watch gaps, %d duplicates, %d reorders, %d uncommitted (%d events checked over %d watcher sessions, %d reconnects with known_index); "+
		"%d ephemeral nodes leaked, %d deleted early; %d liveness failures; faults %v",
		r.Seed, r.Operations, r.Runs, verdict, r.Unknown, partitions, kills,
		r.faultsNamed("crash-unsynced-"), r.UnsyncedCrashes, r.UnsyncedBytes, r.UnsyncedFiles,
		r.faultsNamed("pause-"), r.Faults["pause-leader"], r.Faults["pause-lock-holder"],
		r.faultsNamed("transfer-leader", "replace-member"), r.Faults["transfer-leader"], r.Faults["replace-member"],
		r.Lost, r.Acked, r.StaleWrites, r.Overlaps, r.ResumedRefused, r.ResumedStaleWrites,
		r.WatchGaps, r.WatchDuplicates, r.WatchReorders, r.WatchUncommitted, r.WatchEvents, r.WatchSessions, r.WatchReconnects,
		r.Leaked, r.Early, liveness, r.Faults)
}

// faultsNamed counts the faults whose kind starts with one of prefixes.
func (r *Report) faultsNamed(prefixes ...string) int {
	n := 0
	for kind, count := range r.Faults {
		for _, prefix := range prefixes {
			if strings.HasPrefix(kind, prefix) {
				n += count
				break
			}
		}
	}
	return n
}

// run is the state of one Run.
type run struct {
	cfg     Config
	cluster *proccluster.Cluster

	reportMu sync.Mutex // guards report while workloads and the nemesis run
	report   *Report
	logf     func(format string, args ...any)

	stop chan struct{} // closed when the workloads must stop
	wg   sync.WaitGroup

	randMu sync.Mutex // guards random
	random *rand.Rand // the workloads' choices
	faults *rand.Rand // the fault schedule: used by the nemesis goroutine only, so a seed gives one schedule

	replaced int // members replaced so far (names new members); nemesis goroutine only

	// lockHolders is the lockproc workload, whose client processes the
	// pause-lock-holder fault stops; set by its start, nil without it.
	lockHolders *lockProcs
}

// anomaly records a finding; safe for concurrent use.
func (r *run) anomaly(format string, args ...any) {
	r.update(func(report *Report) { report.anomaly(format, args...) })
}

// update changes the report under its lock; safe for concurrent use.
func (r *run) update(change func(*Report)) {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	change(r.report)
}

// intn draws from the run's seeded source; safe for concurrent use.
func (r *run) intn(n int) int {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.random.IntN(n)
}

// node picks a member's client URL at random.
func (r *run) node() string {
	urls := r.cluster.URLs()
	return urls[r.intn(len(urls))]
}

func (r *run) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// workload is one kind of client activity and its checker.
type workload interface {
	start(r *run)       // launch goroutines counted in r.wg; they end when r.stop closes
	check(r *run) error // after healing and quiescence: add findings to r.report
}

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
	cluster := proccluster.Start(t, proccluster.Options{
		Nodes: cfg.Nodes, Tick: tick, ElectionTicks: electionTicks, MinSessionTimeout: time.Second,
		SnapshotCount: 500, Shards: cfg.Shards, ExtraFlags: cfg.ExtraFlags, Netns: cfg.Partitions, SyncJournal: cfg.UnsyncedCrashes,
	})
	r := &run{
		cfg: cfg, cluster: cluster, report: &report, logf: t.Logf,
		stop: make(chan struct{}), random: rand.New(rand.NewPCG(cfg.Seed, 0x6c61746368)),
		faults: rand.New(rand.NewPCG(cfg.Seed, 0x6661756c74)),
	}
	cluster.WaitLeader(60 * time.Second)
	workloads := r.workloads()
	for _, w := range workloads {
		w.start(r)
	}
	r.nemesis(cfg.Duration)
	close(r.stop)
	r.wg.Wait()
	r.quiesce()
	for _, w := range workloads {
		if err := w.check(r); err != nil {
			report.anomaly("checker could not run: %v", err)
		}
	}
	return report
}

func (r *run) workloads() []workload {
	all := map[string]workload{
		"register": &registers{},
		"lock":     &locks{unchecked: r.cfg.UncheckedGuard},
		"lockproc": &lockProcs{unchecked: r.cfg.UncheckedGuard},
		"sequence": &sequences{},
		"session":  &sessions{},
		"watch":    &watches{dropOne: r.cfg.DropWatchEvent, noKnownIndex: r.cfg.WatchWithoutKnownIndex},
	}
	names := r.cfg.Workloads
	if len(names) == 0 {
		names = []string{"register", "lock", "lockproc", "sequence", "session", "watch"}
	}
	var out []workload
	for _, name := range names {
		if w, ok := all[name]; ok {
			out = append(out, w)
		}
	}
	return out
}

// quiesce waits until every member runs, one leader is agreed, and all
// members applied the same index.
func (r *run) quiesce() {
	for i, m := range r.cluster.Members {
		if !r.cluster.Running(i) {
			r.anomaly("liveness: %s exited on its own (%v); restarted for the checks", m.Name, r.cluster.ExitError(i))
			if err := r.cluster.Restart(i); err != nil {
				r.anomaly("restart %s: %v", m.Name, err)
			}
		}
	}
	if r.settle(30 * time.Second) {
		return
	}
	r.anomaly("liveness: cluster did not quiesce (one leader, equal applied index) within 30s after healing:%s", r.describe())
	// A member stuck behind is restarted, as an operator would, so the
	// safety checks can still look at every replica.
	for _, i := range r.lagging() {
		if err := r.cluster.Restart(i); err != nil {
			r.anomaly("restart %s: %v", r.cluster.Members[i].Name, err)
		}
	}
	if !r.settle(60 * time.Second) {
		r.anomaly("liveness: cluster did not quiesce after restarting the members behind:%s", r.describe())
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

// requestContext bounds one client request.
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
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
