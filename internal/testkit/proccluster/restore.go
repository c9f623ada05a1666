package proccluster

import (
	"fmt"
	"os/exec"
	"strings"
)

// restoreDataDirs prepares every member's data directory from the backup
// file opts.RestoreFrom with 'latchd restore', as an operator seeding a new
// cluster does, before any member starts.
func (c *Cluster) restoreDataDirs(initial string) error {
	for _, m := range c.Members {
		m.mu.Lock()
		args := []string{"restore", c.opts.RestoreFrom, "--name", m.Name, "--data-dir", m.DataDir,
			"--initial-cluster", initial}
		m.mu.Unlock()
		args = append(args, c.opts.RestoreFlags...)
		out, err := exec.Command(c.bin, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("latchd %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
