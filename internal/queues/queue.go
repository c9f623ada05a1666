package queues

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// queueKind is what differs between the lock and the election queues.
type queueKind struct {
	root   string // the directory of every queue of the kind
	prefix string // the name prefix of a queue node
	noun   string // what the request calls the queue: "name" or "role"
	what   string // what a queue is, for messages: "lock" or "election"
}

var (
	lockQueue     = queueKind{root: LocksRoot, prefix: lockPrefix, noun: "name", what: "lock"}
	electionQueue = queueKind{root: ElectionsRoot, prefix: candidatePrefix, noun: "role", what: "election"}
)

// queueMember is one node of a lock or election queue.
type queueMember struct {
	name    string
	path    string
	owner   uint64
	token   uint64 // created index
	value   []byte
	version uint64
}

// queueDir validates a lock name or election role (one path segment) and
// returns its directory.
func queueDir(kind queueKind, name string) (string, error) {
	if name == "" || strings.Contains(name, "/") {
		return "", api.Errorf(api.CodeInvalidArgument, "%s %q must be one non-empty path segment", kind.noun, name)
	}
	dir := kind.root + "/" + name
	if err := api.ValidatePath(dir); err != nil {
		var e *api.Error
		if errors.As(err, &e) {
			return "", api.Errorf(api.CodeInvalidArgument, "%s %q is not valid: %s", kind.noun, name, e.Message)
		}
		return "", err
	}
	return dir, nil
}

// isQueueNode reports whether the node named name, owned by owner (0 for a
// persistent node), is a node of a queue whose nodes are named prefix+N.
func isQueueNode(name string, owner uint64, prefix string) bool {
	if owner == 0 || !strings.HasPrefix(name, prefix) {
		return false
	}
	digits := name[len(prefix):]
	if len(digits) < api.SequenceDigits {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// enqueue adds the session to the queue in dir, or returns its existing place:
// one command, so concurrent or retried calls of one session never make two.
func (q *Queues) enqueue(ctx context.Context, dir, prefix string, session uint64, value []byte) (fsm.NodeMeta, error) {
	cmd := &command.Command{
		Op: command.OpEnqueue, Path: dir + "/" + prefix, Value: value,
		Ephemeral: true, Sequential: true, SessionID: session,
	}
	res, _, err := q.cfg.Replica.Propose(ctx, cmd)
	if err != nil {
		return fsm.NodeMeta{}, err
	}
	if res.Err != nil {
		return fsm.NodeMeta{}, res.Err
	}
	return res.Node, nil
}

// queue lists the queue nodes of dir (see isQueueNode) in order, whether
// dir exists, and the applied index read.
func (q *Queues) queue(dir, prefix string) (members []queueMember, exists bool, index uint64) {
	index = q.cfg.Replica.View(func(f *fsm.FSM) { members, exists = queueIn(f, dir, prefix) })
	return members, exists, index
}

// queueIn is queue over the state f, read under the caller's View.
//
// In a sharded cluster whose shard holds dir's children but not dir's own
// node, dir counts as existing while its directory record is open: a queue
// directory is made by the first enqueue, which opens the record.
func queueIn(f *fsm.FSM, dir, prefix string) (members []queueMember, exists bool) {
	if d, err := f.Directory(dir); err == nil && !d.Opened {
		return nil, false
	}
	names, err := f.Children(dir)
	if err != nil {
		return nil, false
	}
	for _, name := range names {
		n, err := f.Get(api.Join(dir, name))
		if err != nil || !isQueueNode(name, n.Owner, prefix) {
			continue
		}
		members = append(members, queueMember{
			name: name, path: n.Path, owner: n.Owner, token: n.CreatedIndex,
			value: n.Value, version: n.Version,
		})
	}
	return members, true
}

// position returns how many members are ahead of path and the one just
// ahead; found is false if path is no longer in the queue.
func position(members []queueMember, path string) (ahead int, predecessor string, found bool) {
	for i, m := range members {
		if m.path == path {
			if i > 0 {
				predecessor = members[i-1].path
			}
			return i, predecessor, true
		}
	}
	return 0, "", false
}

// deletionWaiters wakes waiters when a node is deleted: the one waiter queued
// behind it, not every waiter of the lock.
type deletionWaiters struct {
	wakeups atomic.Uint64 // waiters woken by a deletion (one per lock release when there is no herd)

	mu      sync.Mutex
	waiting map[string][]chan struct{} // guarded by mu
}

func newDeletionWaiters() *deletionWaiters {
	return &deletionWaiters{waiting: map[string][]chan struct{}{}}
}

// watch returns a channel closed when path is deleted .
func (d *deletionWaiters) watch(path string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	d.waiting[path] = append(d.waiting[path], ch)
	d.mu.Unlock()
	cancel := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		list := d.waiting[path]
		for i, c := range list {
			if c == ch {
				d.waiting[path] = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(d.waiting[path]) == 0 {
			delete(d.waiting, path)
		}
	}
	return ch, cancel
}

// deleted wakes the waiters of the nodes deleted by events (the apply path).
func (d *deletionWaiters) deleted(events []fsm.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.waiting) == 0 {
		return
	}
	for _, e := range events {
		if e.Kind != fsm.EventDeleted {
			continue
		}
		for _, ch := range d.waiting[e.Path] {
			close(ch)
			d.wakeups.Add(1)
		}
		delete(d.waiting, e.Path)
	}
}

// waitEitherDeleted waits until a or b no longer exists (true), or ctx ends
// (false). It registers before it looks, so no deletion falls in between.
func (q *Queues) waitEitherDeleted(ctx context.Context, a, b string) bool {
	goneA, cancelA := q.deletions.watch(a)
	defer cancelA()
	goneB, cancelB := q.deletions.watch(b)
	defer cancelB()
	missing := false
	q.cfg.Replica.View(func(f *fsm.FSM) {
		_, errA := f.Get(a)
		_, errB := f.Get(b)
		missing = errA != nil || errB != nil
	})
	if missing {
		return true
	}
	select {
	case <-goneA:
		return true
	case <-goneB:
		return true
	case <-ctx.Done():
		return false
	}
}

// wakeAll wakes every waiter: after a snapshot replaced the state, deletions
// it covered raised no events, so each waiter must look again.
func (d *deletionWaiters) wakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for path, list := range d.waiting {
		for _, ch := range list {
			close(ch)
		}
		delete(d.waiting, path)
	}
}
