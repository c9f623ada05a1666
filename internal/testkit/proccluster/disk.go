package proccluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Full disks (Options.DiskSize). Each member's data directory is the mount
// point of its own tmpfs of that size, made when the member is named (so a
// member that Replace puts in a slot gets one too) and lazily unmounted in
// t.Cleanup. FillDisk fills one with a filler file until the filesystem
// refuses a write; removing the filler frees the space again.

// ErrNoDiskSize means FillDisk was called on a cluster started without
// Options.DiskSize.
var ErrNoDiskSize = errors.New("proccluster: the members' data directories are not their own filesystems (Options.DiskSize)")

// fillerName is the file FillDisk writes into a data directory.
const fillerName = "proccluster-filler"

// mountDataDirLocked makes m's data directory the mount point of a new
// tmpfs of size (mount's size= syntax). m.mu must be held.
func (c *Cluster) mountDataDirLocked(m *Member, size string) error {
	dir := m.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("proccluster: data directory of %s: %w", m.Name, err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("proccluster: mount a tmpfs on %s: %v: %s", dir, err, out)
	}
	c.t.Cleanup(func() {
		// Lazily: a member still running here is killed by the cluster's
		// own cleanup, and the mount goes once nothing uses it.
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			c.t.Errorf("proccluster: umount %s: %v: %s", dir, err, out)
		}
	})
	return nil
}

// FillDisk fills member i's data directory's filesystem with a filler
// file until a write fails for want of space, and returns the function that
// removes the filler. The member keeps running: what it does on a full disk
// is what the caller watches. The cluster must have been started with
// Options.DiskSize.
func (c *Cluster) FillDisk(i int) (free func() error, err error) {
	if c.opts.DiskSize == "" {
		return nil, ErrNoDiskSize
	}
	m := c.Members[i]
	m.mu.Lock()
	path := filepath.Join(m.DataDir, fillerName)
	m.mu.Unlock()
	free = func() error {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("proccluster: free the disk of slot %d: %w", i, err)
		}
		return nil
	}
	if err := fill(path); err != nil {
		_ = free()
		return nil, err
	}
	return free, nil
}

// fill writes path until the filesystem has no space left.
func fill(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("proccluster: fill: %w", err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for written := 0; written < 1<<34; written += len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return fmt.Errorf("proccluster: fill %s: %w", path, err)
		}
	}
	return fmt.Errorf("proccluster: wrote 16 GiB to %s and it is not full", path)
}
