package proccluster

import "fmt"

// Netns reports whether the members run in network namespaces, so that
// partitions can be made.
func (c *Cluster) Netns() bool { return c.network != nil }

// Block drops every packet from member from to member to (one way). TCP
// then delivers nothing from from to to, while to's data still reaches
// from, unacknowledged.
func (c *Cluster) Block(from, to int) error {
	if c.network == nil {
		return ErrNoPartitions
	}
	if err := c.network.block(from, to); err != nil {
		return fmt.Errorf("block %s -> %s: %w", c.Members[from].Name, c.Members[to].Name, err)
	}
	return nil
}

// Cut drops packets both ways between members a and b.
func (c *Cluster) Cut(a, b int) error {
	if err := c.Block(a, b); err != nil {
		return err
	}
	return c.Block(b, a)
}

// Partition heals the network, then cuts every pair of members that are
// on different sides; members on no side form one more side together, so
// Partition([]int{i}) isolates member i.
func (c *Cluster) Partition(sides ...[]int) error {
	if err := c.Heal(); err != nil {
		return err
	}
	side := make([]int, len(c.Members))
	for i := range side {
		side[i] = -1
	}
	for s, members := range sides {
		for _, i := range members {
			side[i] = s
		}
	}
	for a := range c.Members {
		for b := a + 1; b < len(c.Members); b++ {
			if side[a] != side[b] {
				if err := c.Cut(a, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Heal removes every partition rule.
func (c *Cluster) Heal() error {
	if c.network == nil {
		return ErrNoPartitions
	}
	return c.network.heal()
}
