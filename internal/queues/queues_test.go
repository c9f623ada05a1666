package queues

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
)

// applyingReplica applies each proposal to its state at once and hands the
// events to the queues, as the replica's apply path does.
type applyingReplica struct {
	mu        sync.RWMutex
	fsm       *fsm.FSM
	index     uint64
	q         *Queues
	deferrals []time.Duration // guarded by mu: each enqueue's replica.Deferred delay
}

func (r *applyingReplica) Propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	r.mu.Lock()
	if cmd.Op == command.OpEnqueue {
		r.deferrals = append(r.deferrals, replica.DeferralOf(ctx))
	}
	r.index++
	index := r.index
	res, events := r.fsm.Apply(index, cmd)
	r.mu.Unlock()
	r.q.Applied(events)
	return res, index, nil
}

func (r *applyingReplica) Barrier(context.Context, string, uint64) error { return nil }
func (r *applyingReplica) Unavailable(format string, args ...any) error {
	return api.Errorf(api.CodeUnavailable, format, args...)
}
func (r *applyingReplica) View(fn func(f *fsm.FSM)) uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.fsm)
	return r.fsm.Applied()
}

// newQueues returns Queues over a state holding sessions 1 to n.
func newQueues(t *testing.T, n uint64) (*Queues, *applyingReplica) {
	t.Helper()
	r := &applyingReplica{fsm: fsm.New()}
	q := New(Config{Replica: r, MaxValueSize: 16})
	r.q = q
	for id := uint64(1); id <= n; id++ {
		if res, _, err := r.Propose(context.Background(), &command.Command{Op: command.OpSessionCreate, SessionID: id, TimeoutMs: 10000}); err != nil || res.Err != nil {
			t.Fatalf("create session %d: %v / %v", id, err, res.Err)
		}
	}
	return q, r
}

// TestLockHandoff: the first session holds the lock with its node's index as
// fencing token; the second is told its position and, waiting, is woken by
// the release of the node ahead and then holds it, with a larger token.
func TestLockHandoff(t *testing.T) {
	q, _ := newQueues(t, 2)
	ctx := context.Background()
	first, err := q.AcquireLock(ctx, "db", 1, 0)
	if err != nil || !first.Held {
		t.Fatalf("first acquire: %+v, %v", first, err)
	}
	second, err := q.AcquireLock(ctx, "db", 2, 0)
	if err != nil || second.Held || second.Position != 1 || second.Path == "" || second.FencingToken != 0 {
		t.Fatalf("second acquire without waiting: %+v, %v; want a reply, not held, at position 1 with its queue node and no token", second, err)
	}
	st, err := q.LockState(ctx, "db", api.Linearizable, 0)
	if err != nil || st.Holder == nil || st.Holder.FencingToken != first.FencingToken || st.Waiters != 1 {
		t.Fatalf("lock state %+v, %v; want the first session holding, one waiter", st, err)
	}

	got := make(chan api.Lock, 1)
	go func() {
		l, err := q.AcquireLock(ctx, "db", 2, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// Released once the waiter is registered behind the holder's node.
	deadline := time.Now().Add(10 * time.Second)
	for q.waitingOn(first.Path) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second session never waited on the holder's node")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := q.ReleaseLock(ctx, "db", 1, first.FencingToken); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if !l.Held || l.FencingToken <= first.FencingToken {
			t.Fatalf("after the release: %+v, want held with a token above %d", l, first.FencingToken)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if q.Wakeups() != 1 {
		t.Fatalf("%d wakeups, want exactly one (no herd)", q.Wakeups())
	}
}

// TestPlaceBehindAnotherIsDeferred: an acquire that will wait behind
// another session's place proposes its own place deferred (it may wait to
// leave with another write); one that may hold at once, or will not wait,
// or already has a place (its holder's included) proposes it at once.
func TestPlaceBehindAnotherIsDeferred(t *testing.T) {
	q, r := newQueues(t, 3)
	ctx := context.Background()
	first, err := q.AcquireLock(ctx, "db", 1, time.Second)
	if err != nil || !first.Held {
		t.Fatalf("first acquire: %+v, %v", first, err)
	}
	steps := []struct {
		what    string
		session uint64
		wait    time.Duration
		want    time.Duration
	}{
		{"a try behind the holder", 2, 0, 0},
		{"a wait behind the holder and a waiter", 3, time.Millisecond, replica.PlaceDeferral},
		{"the holder's acquire again", 1, time.Second, 0},
		{"a waiter's acquire again", 3, time.Millisecond, 0},
	}
	for _, st := range steps {
		if _, err := q.AcquireLock(ctx, "db", st.session, st.wait); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.deferrals) != 1+len(steps) || r.deferrals[0] != 0 {
		t.Fatalf("deferrals of the enqueues %v, want %d with the first (an empty queue) 0", r.deferrals, 1+len(steps))
	}
	for i, st := range steps {
		if got := r.deferrals[i+1]; got != st.want {
			t.Errorf("%s: deferred %v, want %v", st.what, got, st.want)
		}
	}
}

// TestReleaseNotHeld: releasing a lock the session has no place in is
// lock_not_held, and an invalid name is invalid_argument.
func TestReleaseNotHeld(t *testing.T) {
	q, _ := newQueues(t, 1)
	ctx := context.Background()
	if _, err := q.ReleaseLock(ctx, "db", 1, 0); api.CodeOf(err) != api.CodeLockNotHeld {
		t.Fatalf("release of a lock never taken: %v, want lock_not_held", err)
	}
	if _, err := q.AcquireLock(ctx, "a/b", 1, 0); api.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("a name with a slash: %v, want invalid_argument", err)
	}
}

// TestElectionOrder: candidates lead in the order they joined; each watches
// the one just ahead; a rejoin keeps the place and replaces the value.
func TestElectionOrder(t *testing.T) {
	q, _ := newQueues(t, 3)
	ctx := context.Background()
	var joined []api.Candidacy
	for id := uint64(1); id <= 3; id++ {
		c, err := q.JoinElection(ctx, "primary", id, []byte{byte('a' + id)})
		if err != nil {
			t.Fatal(err)
		}
		joined = append(joined, c)
	}
	if !joined[0].IsLeader || joined[1].IsLeader || joined[2].IsLeader {
		t.Fatalf("leadership %v %v %v, want the first only", joined[0].IsLeader, joined[1].IsLeader, joined[2].IsLeader)
	}
	if joined[0].Watching != "" || joined[1].Watching == "" || joined[2].Watching == joined[1].Watching {
		t.Fatalf("watching %q %q %q, want none, then each the one ahead", joined[0].Watching, joined[1].Watching, joined[2].Watching)
	}
	again, err := q.JoinElection(ctx, "primary", 2, []byte("new"))
	if err != nil || again.FencingToken != joined[1].FencingToken {
		t.Fatalf("rejoin: %+v, %v; want the same place (token %d)", again, err, joined[1].FencingToken)
	}
	if _, err := q.ResignElection(ctx, "primary", 1); err != nil {
		t.Fatal(err)
	}
	st, err := q.ElectionState(ctx, "primary", api.Linearizable, 0)
	if err != nil || st.Leader == nil || st.Leader.Value != "new" || st.Candidates != 2 {
		t.Fatalf("election state %+v, %v; want session 2 leading with its new value, two candidates", st, err)
	}
	if _, err := q.JoinElection(ctx, "primary", 3, make([]byte, 17)); api.CodeOf(err) != api.CodeTooLarge {
		t.Fatalf("an oversized value: %v, want too_large", err)
	}
}

// TestPosition: the members ahead of a node and the one just ahead.
func TestPosition(t *testing.T) {
	members := []queueMember{{path: "/q/a"}, {path: "/q/b"}, {path: "/q/c"}}
	tests := []struct {
		name        string
		path        string
		ahead       int
		predecessor string
		found       bool
	}{
		{"the head", "/q/a", 0, "", true},
		{"second", "/q/b", 1, "/q/a", true},
		{"last", "/q/c", 2, "/q/b", true},
		{"gone", "/q/x", 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ahead, predecessor, found := position(members, tt.path)
			if ahead != tt.ahead || predecessor != tt.predecessor || found != tt.found {
				t.Fatalf("position(%q) = %d, %q, %v; want %d, %q, %v", tt.path, ahead, predecessor, found, tt.ahead, tt.predecessor, tt.found)
			}
		})
	}
}

// waitingOn counts the waiters registered on path's deletion.
func (q *Queues) waitingOn(path string) int {
	q.deletions.mu.Lock()
	defer q.deletions.mu.Unlock()
	return len(q.deletions.waiting[path])
}
