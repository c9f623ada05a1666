package chaos

import (
	"errors"
	"fmt"
	"time"
)

// Full disks (Config.DiskFaults): every member's data directory is its own
// small tmpfs (proccluster Options.DiskSize) and its WAL segments are small,
// so a member whose disk fills soon needs space it cannot get: a new WAL
// segment, a snapshot. It must neither exit nor acknowledge what it cannot
// persist (docs/design.md, "A full disk"); the others serve on. The heal
// frees the space, and the member must recover by itself: its status says
// storage "ok" again within diskRecovery.

const (
	diskSize       = "96m"
	walSegmentSize = 4 << 20
	diskRecovery   = 30 * time.Second
)

// diskSizeOf is proccluster's DiskSize for cfg.
func diskSizeOf(cfg Config) string {
	if cfg.DiskFaults {
		return diskSize
	}
	return ""
}

// diskFlags are the latchd flags of a run with full disks.
func diskFlags() []string {
	return []string{"--unsafe-wal-segment-size", fmt.Sprint(walSegmentSize)}
}

// fillDisk is the disk-full fault: a random running member's disk is
// filled; the heal frees it and waits until the member recovered.
func (r *run) fillDisk() (func() error, error) {
	live := r.cluster.Live()
	if len(live) == 0 {
		return nil, errors.New("no member runs")
	}
	i := live[r.faults.IntN(len(live))]
	free, err := r.cluster.FillDisk(i)
	if err != nil {
		return nil, err
	}
	name := r.cluster.Members[i].Name
	r.Logf("chaos: %s's disk is full", name)
	return func() error {
		if st, err := r.cluster.Status(i); err == nil {
			r.Logf("chaos: %s before its disk is freed: storage %s %s", name, st.Storage, st.StorageError)
		}
		if err := free(); err != nil {
			return err
		}
		return r.waitStorageOK(i, name)
	}, nil
}

// waitStorageOK waits until member i says its storage is ok.
func (r *run) waitStorageOK(i int, name string) error {
	var last string
	for deadline := time.Now().Add(diskRecovery); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := r.cluster.Status(i)
		if err == nil && st.Storage == "ok" {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = st.Storage + ": " + st.StorageError
		}
	}
	return fmt.Errorf("%s did not recover from a full disk within %v after space was freed: %s", name, diskRecovery, last)
}
