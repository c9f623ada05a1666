package client

import (
	"sync"
	"sync/atomic"

	"github.com/latch-io/latch/api"
)

// fetch reads paths linearizably, in parallel; a node that does not exist
// is absent from the result. Any other failure fails the whole fetch.
func (c *Cache) fetch(paths []string) (map[string]CachedNode, error) {
	read := make([]*api.Node, len(paths))
	err := c.parallel(len(paths), func(i int) error {
		node, err := c.client.Get(c.ctx, paths[i])
		if api.CodeOf(err) == api.CodeNotFound {
			return nil
		}
		read[i] = node
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]CachedNode, len(paths))
	for i, node := range read {
		if node != nil {
			out[paths[i]] = cachedNode(node)
		}
	}
	return out, nil
}

func cachedNode(n *api.Node) CachedNode {
	return CachedNode{Value: n.Value, Version: n.Version, CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex}
}

// reload reads the whole prefix, level by level (a node's children are
// listed once it is read), and replaces the cached state with it.
func (c *Cache) reload() error {
	found := map[string]CachedNode{}
	level := []string{c.prefix}
	for len(level) > 0 {
		read := make([]*api.Node, len(level))
		children := make([][]string, len(level))
		err := c.parallel(len(level), func(i int) error {
			var err error
			read[i], children[i], err = c.readWithChildren(level[i])
			return err
		})
		if err != nil {
			return err
		}
		var next []string
		for i, node := range read {
			if node == nil {
				continue
			}
			found[level[i]] = cachedNode(node)
			for _, name := range children[i] {
				next = append(next, childPrefix(level[i])+name)
			}
		}
		level = next
	}
	c.replace(found)
	return nil
}

// readWithChildren reads the node at path and, if it has children, their
// names; a node gone meanwhile is (nil, nil, nil).
func (c *Cache) readWithChildren(path string) (*api.Node, []string, error) {
	node, err := c.client.Get(c.ctx, path)
	if api.CodeOf(err) == api.CodeNotFound {
		return nil, nil, nil
	}
	if err != nil || node.ChildrenCount == 0 {
		return node, nil, err
	}
	list, err := c.client.Children(c.ctx, path)
	if api.CodeOf(err) == api.CodeNotFound {
		return node, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return node, list.Children, nil
}

// parallel runs fn(0..n-1) on at most the configured number of goroutines
// and returns the first error; after one, the remaining calls are skipped.
func (c *Cache) parallel(n int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		firstErr error
		once     sync.Once
		workers  sync.WaitGroup
	)
	for range min(c.opts.concurrency, n) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := int(next.Add(1) - 1); i < n && !failed.Load(); i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		}()
	}
	workers.Wait()
	return firstErr
}

// store applies refetched paths: a node read is stored unless the cache
// holds a state as new; a node not found is removed (the read is newer than
// anything stored: reads run one batch at a time and are linearizable).
func (c *Cache) store(read map[string]CachedNode, paths []string) {
	var changes []CacheChange
	c.mu.Lock()
	for _, path := range paths {
		changes = c.setLocked(path, read, changes)
	}
	c.mu.Unlock()
	c.notify(changes)
}

// replace makes found the cached state: a reload.
func (c *Cache) replace(found map[string]CachedNode) {
	var changes []CacheChange
	c.mu.Lock()
	for path := range c.nodes {
		if _, ok := found[path]; !ok {
			changes = c.setLocked(path, found, changes)
		}
	}
	for path := range found {
		changes = c.setLocked(path, found, changes)
	}
	c.mu.Unlock()
	c.notify(changes)
}

// setLocked moves path forward to its state in read (absent: deleted), never
// back, appending the change made, if any. c.mu must be held.
func (c *Cache) setLocked(path string, read map[string]CachedNode, changes []CacheChange) []CacheChange {
	old, had := c.nodes[path]
	node, found := read[path]
	switch {
	case found && (!had || node.ModifiedIndex > old.ModifiedIndex):
		c.nodes[path] = node
		return append(changes, CacheChange{Path: path, Node: node})
	case !found && had:
		delete(c.nodes, path)
		return append(changes, CacheChange{Path: path, Deleted: true})
	}
	return changes
}

func (c *Cache) notify(changes []CacheChange) {
	if c.opts.onChange == nil {
		return
	}
	for _, change := range changes {
		c.opts.onChange(change)
	}
}
