package check

import (
	"fmt"
	"strings"
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
	// ZKEntries are the fenced writes of ZooKeeper lock holders checked in
	// the log's order (the fault suite's zk workload).
	ZKEntries int
	// Under clock faults (and any fault that cuts a client off): session
	// expiries the client did not cause (it kept heartbeating on a real
	// clock), lock tenures that overlapped in real time (the holder wrote
	// after a later token was granted; fencing must refuse those writes),
	// and tenures held by a lock client on a skewed clock.
	SpuriousExpiries, OverlappingTenures, SkewedLockHolds int
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
	r.ZKEntries += other.ZKEntries
	r.SpuriousExpiries += other.SpuriousExpiries
	r.OverlappingTenures += other.OverlappingTenures
	r.SkewedLockHolds += other.SkewedLockHolds
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
		"%d kill -9 (%d losing unsynced data, %d members crashed so: %d bytes and %d files dropped), %d SIGSTOPs (%d of the leader, %d of lock-holding client processes), %d membership changes (%d leader transfers, %d members replaced), "+
		"%d clock faults (%d member clocks at 0.5x or 2x, %d wall-clock jumps, %d lock clients skewed: %d tenures on a skewed clock), %d full disks; "+
		"%d acknowledged writes lost of %d; %d stale-token writes accepted (%d overlapping holders caught by fencing; %d of %d resumed holder processes' stale writes refused; %d lock tenures overlapping in real time; %d ZooKeeper lock holders' fenced writes in log order); "+
		"%d watch gaps, %d duplicates, %d reorders, %d uncommitted (%d events checked over %d watcher sessions, %d reconnects with known_index); "+
		"%d ephemeral nodes leaked, %d deleted early; %d spurious session expiries; %d liveness failures; faults %v",
		r.Seed, r.Operations, r.Runs, verdict, r.Unknown, partitions, kills,
		r.faultsNamed("crash-unsynced-"), r.UnsyncedCrashes, r.UnsyncedBytes, r.UnsyncedFiles,
		r.faultsNamed("pause-"), r.Faults["pause-leader"], r.Faults["pause-lock-holder"],
		r.faultsNamed("transfer-leader", "replace-member"), r.Faults["transfer-leader"], r.Faults["replace-member"],
		r.faultsNamed("clock-"), r.faultsNamed("clock-fast-", "clock-slow-"), r.faultsNamed("clock-jump"), r.faultsNamed("clock-skew-lock-"), r.SkewedLockHolds, r.Faults["disk-full"],
		r.Lost, r.Acked, r.StaleWrites, r.Overlaps, r.ResumedRefused, r.ResumedStaleWrites, r.OverlappingTenures, r.ZKEntries,
		r.WatchGaps, r.WatchDuplicates, r.WatchReorders, r.WatchUncommitted, r.WatchEvents, r.WatchSessions, r.WatchReconnects,
		r.Leaked, r.Early, r.SpuriousExpiries, liveness, r.Faults)
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
