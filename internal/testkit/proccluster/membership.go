package proccluster

import (
	"fmt"
	"strings"
)

// Replace puts a new member named name in slot i: the old process is
// killed, and the new one keeps the slot's addresses but gets its own data
// directory and log, and starts with --initial-cluster-state existing and
// the --initial-cluster list of the members now in the cluster (the slots
// in others, with their current names) and itself. The cluster must
// already have added it (POST /v1/cluster/members); a name must never be
// used twice, since the cluster remembers removed members by name.
func (c *Cluster) Replace(i int, name string, others []int) error {
	c.Kill(i)
	var initial []string
	for _, j := range others {
		if j != i {
			initial = append(initial, c.Members[j].Name+"="+c.Members[j].PeerAddr)
		}
	}
	initial = append(initial, name+"="+c.Members[i].PeerAddr)
	if err := c.name(i, name, strings.Join(initial, ","), "--initial-cluster-state", "existing"); err != nil {
		return fmt.Errorf("replace slot %d by %s: %w", i, name, err)
	}
	if err := c.start(i); err != nil {
		return fmt.Errorf("replace slot %d by %s: %w", i, name, err)
	}
	return nil
}
