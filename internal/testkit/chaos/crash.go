package chaos

import (
	"errors"
	"fmt"
)

// crashUnsyncedLeader crashes the leader as a power cut of its machine
// would: SIGKILL, then its data directory cut back to what it had fsynced.
func (r *run) crashUnsyncedLeader() (func() error, error) {
	return r.withLeader(func(leader int) (func() error, error) { return r.crashUnsynced([]int{leader}) })
}

// crashUnsyncedAll crashes every member at once that way: a power cut of
// the whole cluster. What was acknowledged was fsynced on a majority, so
// nothing acknowledged may be lost.
func (r *run) crashUnsyncedAll() (func() error, error) {
	return r.crashUnsynced(r.all())
}

// crashUnsynced kills victims together, then cuts each one's data
// directory to its sync journal (proccluster.CrashLosingUnsynced); the heal
// restarts them. If a cut fails the victims are restarted at once and the
// fault counts as not made.
func (r *run) crashUnsynced(victims []int) (func() error, error) {
	restart, _ := r.killAllOf(victims) // all down before the first cut: one instant for all
	var dropped int64
	files := 0
	for _, i := range victims {
		cut, err := r.cluster.CrashLosingUnsynced(i, r.faults.Uint64())
		if err != nil {
			return nil, errors.Join(fmt.Errorf("crash losing unsynced data: %w", err), restart())
		}
		dropped += cut.DroppedBytes
		files += len(cut.Removed)
	}
	r.Update(func(report *Report) {
		report.UnsyncedCrashes += len(victims)
		report.UnsyncedBytes += dropped
		report.UnsyncedFiles += files
	})
	r.Logf("chaos: %d members lost unsynced data: %d bytes dropped, %d unsynced files removed", len(victims), dropped, files)
	return restart, nil
}
