package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
)

// ErrCacheClosed is the error of a Cache after Close.
var ErrCacheClosed = errors.New("client: cache closed")

// CachedNode is a node as a Cache holds it.
type CachedNode struct {
	Value         string
	Version       uint64
	CreatedIndex  uint64
	ModifiedIndex uint64
}

// CacheChange is one change a Cache applied, as its OnChange callback sees it.
type CacheChange struct {
	Path    string
	Node    CachedNode // the new state; zero when Deleted
	Deleted bool
}

// CacheOption adjusts a Cache.
type CacheOption func(*cacheOptions)

type cacheOptions struct {
	onChange    func(CacheChange)
	concurrency int
	retryDelay  time.Duration
}

// OnCacheChange makes the cache call fn after each change it applies (a
// node made, changed or gone), once the new state is what Get returns. fn
// runs on the cache's one updating goroutine, in the order of the changes,
// and holds it up: keep it short.
func OnCacheChange(fn func(CacheChange)) CacheOption {
	return func(o *cacheOptions) { o.onChange = fn }
}

// CacheFetchConcurrency bounds the reads a cache has in flight while it
// loads or reloads its prefix and refetches changed nodes (default 16).
func CacheFetchConcurrency(n int) CacheOption {
	return func(o *cacheOptions) { o.concurrency = max(n, 1) }
}

// Cache holds the nodes under a prefix (the prefix node included) in memory,
// fed by one persistent recursive watch of its session: reads (Get) are
// served from memory; a consistent read (GetConsistent) goes to the server.
//
// How it stays right:
//   - Lossless. The watch is registered before the first load, so every
//     change after the load's reads is notified; across a lost event stream
//     (a server killed, failover) the session re-registers the watch with
//     known_index, and a change missed meanwhile comes back as a resync,
//     upon which the cache reloads the whole prefix.
//   - Refetch on notification. A notification carries no value: the cache
//     re-reads the changed nodes, linearizably, and stores what it read.
//     All loads, reloads and refetches run one batch at a time on one
//     goroutine, and a linearizable read sees at least everything an
//     earlier one saw, so each node's state only moves forward.
//   - Monotonic. Get never returns a value older than one it returned
//     before (a node's ModifiedIndex never decreases, and a node is removed
//     only by a read newer than its last stored state); once OnChange has
//     been called for a change, Get returns that state or a newer one.
//
// A read that fails (no server reachable) is retried until it succeeds or
// the cache is closed; meanwhile Get serves the last state. If the watch
// ends (the session ended), the cache stops following the server: Err says
// why, and Get keeps serving the last state.
type Cache struct {
	client  *Client
	prefix  string
	opts    cacheOptions
	watcher *Watcher

	mu    sync.RWMutex
	nodes map[string]CachedNode

	pendingMu sync.Mutex
	pending   cacheBatch
	wake      chan struct{} // capacity 1: pending has work

	err       atomic.Pointer[error]
	stop      chan struct{}
	stopOnce  sync.Once
	cancel    context.CancelFunc // ends the watch and in-flight reads
	ctx       context.Context
	processed chan struct{} // closed when the updating goroutine returned
	// processing is set once the updating goroutine runs (after the first load).
	processing atomic.Bool
	received   chan struct{} // closed when the receiving goroutine returned
}

// cacheBatch is the work the updating goroutine takes at once.
type cacheBatch struct {
	reload  bool
	paths   map[string]struct{}
	waiters []chan struct{} // closed once the batch is applied
}

func (b *cacheBatch) empty() bool { return !b.reload && len(b.paths) == 0 && len(b.waiters) == 0 }

// NewCache starts a cache of the nodes under prefix on session s: it
// registers the watch, loads the prefix (ctx bounds the registration and the
// first load) and follows the server until Close or the session's end.
func NewCache(ctx context.Context, s *Session, prefix string, opts ...CacheOption) (*Cache, error) {
	if err := api.ValidatePath(prefix); err != nil {
		return nil, err
	}
	o := cacheOptions{concurrency: 16, retryDelay: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	life, cancel := context.WithCancel(context.Background())
	c := &Cache{client: s.client, prefix: prefix, opts: o, nodes: map[string]CachedNode{},
		pending: cacheBatch{paths: map[string]struct{}{}}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), cancel: cancel, ctx: life,
		processed: make(chan struct{}), received: make(chan struct{})}
	watcher, err := s.Watch(life, prefix, WatchRecursive(), Persistent(), WatchJitter(0))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: cache of %s: %w", prefix, err)
	}
	c.watcher = watcher
	go c.receive()
	if err := c.firstLoad(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.processing.Store(true)
	go c.process()
	return c, nil
}

// firstLoad loads the prefix, retrying failed reads until ctx ends.
func (c *Cache) firstLoad(ctx context.Context) error {
	for {
		err := c.reload()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("client: cache of %s: first load: %w (last error: %w)", c.prefix, ctx.Err(), err)
		case <-c.stop:
			return c.Err()
		case <-time.After(c.opts.retryDelay):
		}
	}
}

// Get returns the cached node at path, from memory: false if the cache
// holds no node there (none exists, or path is not under the prefix).
func (c *Cache) Get(path string) (CachedNode, bool) {
	c.mu.RLock()
	node, ok := c.nodes[path]
	c.mu.RUnlock()
	return node, ok
}

// GetConsistent reads path from the server, linearizably, stores what it
// read in the cache (through the cache's updating goroutine, so the cache
// stays monotonic) and returns it: the node as of a moment after the call
// began. It waits for the batch the cache is applying, if any.
func (c *Cache) GetConsistent(ctx context.Context, path string) (CachedNode, bool, error) {
	if !c.covers(path) {
		return CachedNode{}, false, api.Errorf(api.CodeInvalidArgument, "path %q is not under the cache's prefix %q", path, c.prefix)
	}
	done := make(chan struct{})
	c.pendingMu.Lock()
	c.pending.paths[path] = struct{}{}
	c.pending.waiters = append(c.pending.waiters, done)
	c.pendingMu.Unlock()
	c.signal()
	select {
	case <-done:
		node, ok := c.Get(path)
		return node, ok, nil
	case <-c.stop:
		return CachedNode{}, false, c.Err()
	case <-ctx.Done():
		return CachedNode{}, false, fmt.Errorf("client: cache read of %s: %w", path, ctx.Err())
	}
}

// covers reports whether path is the prefix or under it.
func (c *Cache) covers(path string) bool {
	return path == c.prefix || strings.HasPrefix(path, childPrefix(c.prefix))
}

func childPrefix(path string) string {
	if path == "/" {
		return "/"
	}
	return path + "/"
}

// Len returns the number of cached nodes.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.nodes)
}

// Nodes returns a copy of every cached node by path.
func (c *Cache) Nodes() map[string]CachedNode {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]CachedNode, len(c.nodes))
	for path, node := range c.nodes {
		out[path] = node
	}
	return out
}

// Prefix returns the cached prefix.
func (c *Cache) Prefix() string { return c.prefix }

// Err returns why the cache stopped following the server: nil while it
// follows, ErrCacheClosed after Close, or the watch's error (the session
// ended).
func (c *Cache) Err() error {
	if err := c.err.Load(); err != nil {
		return *err
	}
	return nil
}

// Close stops the cache; Get keeps serving the last state.
func (c *Cache) Close() {
	c.end(ErrCacheClosed)
	<-c.received
	if c.processing.Load() {
		<-c.processed
	}
}

// end stops following with reason (the first reason wins).
func (c *Cache) end(reason error) {
	c.stopOnce.Do(func() {
		c.err.Store(&reason)
		close(c.stop)
		c.cancel()
	})
}

func (c *Cache) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// receive turns the watcher's notifications into pending work: a path to
// refetch, or a reload after a resync. It never blocks on the updating
// goroutine, so the watcher never overflows however long a reload takes.
func (c *Cache) receive() {
	defer close(c.received)
	for ev := range c.watcher.Events() {
		c.pendingMu.Lock()
		switch {
		case ev.Resync:
			c.pending.reload = true
		case ev.Event.Event != api.EventChildrenChanged:
			c.pending.paths[ev.Path] = struct{}{}
		}
		c.pendingMu.Unlock()
		c.signal()
	}
	err := c.watcher.Err()
	if err == nil || errors.Is(err, ErrWatchClosed) {
		err = ErrCacheClosed
	}
	c.end(err)
}

// process applies pending work one batch at a time until the cache ends.
func (c *Cache) process() {
	defer close(c.processed)
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		for {
			batch := c.take()
			if batch.empty() {
				break
			}
			if err := c.apply(batch); err != nil {
				c.putBack(batch)
				select {
				case <-c.stop:
					return
				case <-time.After(c.opts.retryDelay):
				}
				continue
			}
			for _, done := range batch.waiters {
				close(done)
			}
		}
	}
}

func (c *Cache) take() cacheBatch {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	batch := c.pending
	c.pending = cacheBatch{paths: map[string]struct{}{}}
	return batch
}

// putBack returns a failed batch's work to pending, to be retried.
func (c *Cache) putBack(batch cacheBatch) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	c.pending.reload = c.pending.reload || batch.reload
	for path := range batch.paths {
		c.pending.paths[path] = struct{}{}
	}
	c.pending.waiters = append(c.pending.waiters, batch.waiters...)
}

// apply does one batch: a reload of the whole prefix supersedes the paths
// to refetch, since its reads are newer than their notifications.
func (c *Cache) apply(batch cacheBatch) error {
	if batch.reload {
		return c.reload()
	}
	paths := make([]string, 0, len(batch.paths))
	for path := range batch.paths {
		paths = append(paths, path)
	}
	read, err := c.fetch(paths)
	if err != nil {
		return err
	}
	c.store(read, paths)
	return nil
}
