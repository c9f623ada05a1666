package proccluster

import (
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"

	"github.com/latch-io/latch/internal/testkit/crashfs"
	"github.com/latch-io/latch/internal/vfs"
)

// ErrNoSyncJournal means CrashLosingUnsynced was called on a cluster
// started without Options.SyncJournal.
var ErrNoSyncJournal = errors.New("proccluster: the cluster runs without sync journals (Options.SyncJournal)")

// journalPathLocked is where member m's sync journal lives: beside its data
// directory, named after its current name. m.mu must be held, or m not
// renamed concurrently (see Member).
func journalPathLocked(m *Member) string {
	return filepath.Join(filepath.Dir(m.DataDir), m.Name+".journal")
}

// CrashLosingUnsynced crashes member i as a power cut of its machine would:
// it kills the process with SIGKILL, then cuts its data directory back to
// what the process had fsynced, by its sync journal (crashfs.CutToJournal).
// Bytes written but not synced are lost, files and renames no directory
// sync made durable are undone; seed decides, at random, whether unsynced
// sectors are torn (kept or zeroed each) or all dropped. It returns what the
// cut did; the member stays down until Restart(i). The cluster must have
// been started with Options.SyncJournal. Call it from one goroutine per
// member, not concurrently with Replace of that slot.
func (c *Cluster) CrashLosingUnsynced(i int, seed uint64) (crashfs.CutReport, error) {
	if !c.opts.SyncJournal {
		return crashfs.CutReport{}, ErrNoSyncJournal
	}
	c.Kill(i)
	m := c.Members[i]
	m.mu.Lock()
	name, journal := m.Name, journalPathLocked(m)
	m.mu.Unlock()
	random := rand.New(rand.NewSource(int64(seed)))
	report, err := crashfs.CutToJournal(journal, vfs.CrashOptions{TornSectors: random.Intn(2) == 0, Rand: random})
	if err != nil {
		return report, fmt.Errorf("proccluster: crash %s losing unsynced data: %w", name, err)
	}
	return report, nil
}
