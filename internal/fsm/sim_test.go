package fsm

import (
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// The sharding simulation: one state machine per shard, and the server-side
// steps of docs/design.md's protocols (directory opens and closes, session
// checks and cleanups) run by concurrent actors whose steps, and the commits
// of their proposals, interleave at random. A proposal waits in its shard's
// pending set until the scheduler commits it, in any order relative to the
// others, as raft may order concurrent proposals; an actor may also stop
// midway (its server crashed), leaving a closing mark that a recovery actor
// finishes. After every commit the test checks the cross-shard invariants.

// simProposal is a proposal waiting to be committed in a shard.
type simProposal struct {
	shard  int
	cmd    command.Command
	done   bool
	result Result
}

// sim is the simulated cluster.
type sim struct {
	t       *testing.T
	c       *cluster
	rng     *rand.Rand
	pending []*simProposal
	actors  []*simActor
	// sessions holds every session id drawn; live ones are in shard 0.
	sessions []uint64
	// lastSeq is, per parent path, the highest sequential number handed out.
	lastSeq map[string]uint64
	// holders is, per lock directory, the holder's node and token seen last.
	holders map[string]Node
	// crashed holds closing marks whose deleting server stopped midway.
	crashed []crashedDelete
	stats   map[string]int
}

type crashedDelete struct {
	path              string
	mark, incarnation uint64
}

// simActor is a coroutine running one operation's server-side steps.
type simActor struct {
	name string
	next func() (struct{}, bool)
	stop func()
}

// yield lets the scheduler run something else; an actor calls it between
// any two steps.
type yieldFunc func(struct{}) bool

func (s *sim) spawn(name string, run func(yield yieldFunc)) {
	next, stop := iter.Pull(iter.Seq[struct{}](func(yield func(struct{}) bool) { run(yield) }))
	s.actors = append(s.actors, &simActor{name: name, next: next, stop: stop})
}

// propose queues cmd in shard and waits (yielding) until it is committed.
func (s *sim) propose(yield yieldFunc, shard int, cmd command.Command) (Result, bool) {
	p := &simProposal{shard: shard, cmd: cmd}
	s.pending = append(s.pending, p)
	for !p.done {
		if !yield(struct{}{}) {
			return Result{}, false
		}
	}
	return p.result, true
}

// commit applies one pending proposal, picked at random, and checks the
// invariants.
func (s *sim) commit() {
	i := s.rng.IntN(len(s.pending))
	p := s.pending[i]
	s.pending = slices.Delete(s.pending, i, i+1)
	h := s.c.shards[p.shard]
	p.result, _ = h.apply(p.cmd)
	p.done = true
	s.stats[p.cmd.Op.String()]++
	if p.result.Redo != RedoNone {
		s.stats["redo "+p.result.Redo.String()]++
	}
	if p.cmd.Ephemeral && p.result.Err == nil && p.shard != 0 {
		if _, err := s.c.shards[0].f.Session(p.cmd.SessionID); err != nil {
			s.stats["ephemeral made after its session's end"]++
		}
	}
	s.observe(p)
	if err := s.check(); err != nil {
		s.t.Fatalf("after %v %q in shard %d at %d: %v", p.cmd.Op, p.cmd.Path, p.shard, h.index, err)
	}
}

// observe checks what a single result must satisfy: sequential numbers
// strictly increase under a parent (so are never reused), and the tokens of
// successive holders of a lock strictly increase.
func (s *sim) observe(p *simProposal) {
	r := p.result
	if r.Err != nil || (p.cmd.Op != command.OpPut && p.cmd.Op != command.OpEnqueue) {
		return
	}
	if p.cmd.Sequential || p.cmd.Op == command.OpEnqueue {
		if r.Node.Path == "" || r.Node.CreatedIndex != s.c.shards[p.shard].index {
			return // an enqueue that found the session's place, or an update
		}
		n, err := strconv.ParseUint(r.Node.Path[len(p.cmd.Path):], 10, 64)
		if err != nil {
			s.t.Fatalf("sequential name %q: %v", r.Node.Path, err)
		}
		parent := api.Parent(p.cmd.Path)
		if last, seen := s.lastSeq[parent]; seen && n <= last {
			s.t.Fatalf("sequential name %q under %q after number %d: reused or out of order", r.Node.Path, parent, last)
		}
		s.lastSeq[parent] = n
	}
}

// check verifies every invariant that must hold at any instant.
func (s *sim) check() error {
	var errs []error
	meta := s.c.shards[0].f
	for k, h := range s.c.shards {
		if err := checkShardInvariants(h.f); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", k, err))
		}
		if err := checkQuotaCounts(h.f); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", k, err))
		}
		// No child under a deleted directory: every open record's directory
		// exists in its own shard, with the record's incarnation.
		h.f.dirs.Scan(func(r dirRecord) bool {
			n, err := s.c.node(r.path).f.Get(r.path)
			if err != nil || n.CreatedIndex != r.incarnation {
				errs = append(errs, fmt.Errorf("shard %d has directory %q of incarnation %d (%d children), but its node is %+v, %v",
					k, r.path, r.incarnation, r.children, n.NodeMeta, err))
			}
			return true
		})
		// No leak: every session state outside shard 0 is of a session live
		// or ending in shard 0.
		if k != 0 {
			h.f.sessions.Scan(func(ss session) bool {
				_, live := meta.sessions.Get(session{id: ss.id})
				_, ending := meta.ending.Get(endingSession{id: ss.id})
				if !live && !ending {
					errs = append(errs, fmt.Errorf("shard %d keeps session %d (%d ephemerals), which ended and was cleaned", k, ss.id, ss.ephemerals))
				}
				return true
			})
		}
	}
	for dir, last := range s.holders {
		names, _ := s.c.dir(dir).f.Children(dir)
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		holder, _ := s.c.dir(dir).f.Get(dir + "/" + names[0])
		if holder.Path != last.Path {
			if holder.CreatedIndex <= last.CreatedIndex {
				errs = append(errs, fmt.Errorf("lock %q: holder %q has token %d after %q had %d", dir, holder.Path, holder.CreatedIndex, last.Path, last.CreatedIndex))
			}
			s.holders[dir] = holder
		}
	}
	return errors.Join(errs...)
}

// pick returns a random element of list.
func pick[T any](rng *rand.Rand, list []T) T { return list[rng.IntN(len(list))] }

const simAttempts = 6 // a server's attempts before it answers 503

// createUnder runs the create protocol: the child of dir named name (or a
// sequential child, or a lock queue place), ephemeral if sid != 0.
func (s *sim) createUnder(yield yieldFunc, dir, name string, op command.Op, sequential bool, sid uint64) {
	shard := s.c.m.ChildShard(dir)
	foreign := s.c.m.Shard(dir) != shard
	tryPlain := s.rng.IntN(2) == 0
	for range simAttempts {
		observed := s.c.shards[shard].f.Applied() // the barrier
		if !yield(struct{}{}) {
			return
		}
		var incarnation uint64
		if foreign && !tryPlain {
			n, err := s.c.node(dir).f.Get(dir) // a linearizable read in the directory's shard
			if err != nil || n.Owner != 0 {
				return // 404 or 400
			}
			if e, _ := s.c.node(dir).f.lookup(dir); e.closing != 0 {
				return // a delete in progress: 404-like refusal of the create
			}
			incarnation = n.CreatedIndex
			if !yield(struct{}{}) {
				return
			}
		}
		if sid != 0 && shard != 0 {
			if _, err := s.c.shards[0].f.Session(sid); err != nil {
				return // 410
			}
			if !yield(struct{}{}) {
				return
			}
		}
		for range s.rng.IntN(6) { // the proposal travels (forwarding, queues)
			if !yield(struct{}{}) {
				return
			}
		}
		cmd := command.Command{Op: op, Path: dir + "/" + name, Sequential: sequential, Incarnation: incarnation, Observed: observed}
		if sid != 0 {
			cmd.Ephemeral, cmd.SessionID = true, sid
		}
		r, ok := s.propose(yield, shard, cmd)
		if !ok {
			return
		}
		switch r.Redo {
		case RedoNone:
			return
		case RedoOpenDirectory:
			tryPlain = false
		case RedoCreateParent:
			return
		}
	}
}

// deleteDir runs the delete of the childless persistent node path: plain
// where its children would live in its own shard, else the close protocol.
// With crash set, the server stops after the mark or the close.
func (s *sim) deleteDir(yield yieldFunc, path string, crash bool) {
	shard := s.c.m.Shard(path)
	if s.c.m.ChildShard(path) == shard {
		s.propose(yield, shard, del(path))
		return
	}
	mark, ok := s.propose(yield, shard, command.Command{Op: command.OpDirMark, Path: path})
	if !ok || mark.Err != nil {
		return
	}
	d := crashedDelete{path: path, mark: mark.Mark, incarnation: mark.Node.CreatedIndex}
	if crash && s.rng.IntN(2) == 0 {
		s.crashed = append(s.crashed, d)
		return
	}
	s.finishDelete(yield, d, crash)
}

// finishDelete runs the close and then the delete, or the unmark if the
// directory has children.
func (s *sim) finishDelete(yield yieldFunc, d crashedDelete, crash bool) {
	closed, ok := s.propose(yield, s.c.m.ChildShard(d.path), command.Command{Op: command.OpDirClose, Path: d.path, Incarnation: d.incarnation})
	if !ok {
		return
	}
	if crash {
		s.crashed = append(s.crashed, d)
		return
	}
	shard := s.c.m.Shard(d.path)
	if closed.Err != nil {
		s.propose(yield, shard, command.Command{Op: command.OpDirUnmark, Path: d.path, Mark: d.mark})
		return
	}
	s.propose(yield, shard, command.Command{Op: command.OpDirDelete, Path: d.path, Mark: d.mark})
}

// cleanup is shard 0's leader finishing the ending list: sessions_ended in
// every other shard, then sessions_cleaned.
func (s *sim) cleanup(yield yieldFunc) {
	var ids []uint64
	for _, e := range s.c.shards[0].f.EndingSessions() {
		ids = append(ids, e.ID)
	}
	if len(ids) == 0 {
		return
	}
	for k := 1; k < testShards; k++ {
		if _, ok := s.propose(yield, k, command.Command{Op: command.OpSessionsEnded, Sessions: ids}); !ok {
			return
		}
	}
	s.propose(yield, 0, command.Command{Op: command.OpSessionsCleaned, Sessions: ids})
}

// releaseOne deletes a random ephemeral node of a session, as its release,
// with the session check outside shard 0.
func (s *sim) releaseOne(yield yieldFunc, dir string) {
	shard := s.c.m.ChildShard(dir)
	names, _ := s.c.shards[shard].f.Children(dir)
	if len(names) == 0 {
		return
	}
	n, err := s.c.shards[shard].f.Get(dir + "/" + pick(s.rng, names))
	if err != nil || n.Owner == 0 {
		return
	}
	observed := s.c.shards[shard].f.Applied()
	if !yield(struct{}{}) {
		return
	}
	if _, err := s.c.shards[0].f.Session(n.Owner); err != nil {
		return
	}
	if !yield(struct{}{}) {
		return
	}
	d := delAs(del(n.Path), n.Owner)
	d.Observed = observed
	s.propose(yield, shard, d)
}

// spawnRandom starts one random operation.
func (s *sim) spawnRandom(tops, locks []string) {
	rng := s.rng
	live := func() uint64 {
		if list := s.c.shards[0].f.Sessions(); len(list) > 0 {
			return pick(rng, list).ID
		}
		return 0
	}
	// A directory: a top-level one or one of its children.
	dir := pick(rng, tops)
	if rng.IntN(2) == 0 {
		dir += "/c" + strconv.Itoa(rng.IntN(2))
	}
	switch n := rng.IntN(100); {
	case n < 15:
		s.spawn("mkdir", func(yield yieldFunc) {
			if strings.Count(dir, "/") == 1 {
				s.propose(yield, s.c.m.Shard(dir), command.Command{Op: command.OpPut, Path: dir, Precondition: command.PrecondNone})
			} else {
				s.createUnder(yield, api.Parent(dir), dir[strings.LastIndexByte(dir, '/')+1:], command.OpPut, false, 0)
			}
		})
	case n < 35:
		sid := uint64(0)
		if rng.IntN(2) == 0 {
			sid = live()
		}
		seq := rng.IntN(2) == 0
		name := "c" + strconv.Itoa(rng.IntN(2))
		if seq {
			name = "s-"
		}
		s.spawn("create", func(yield yieldFunc) { s.createUnder(yield, dir, name, command.OpPut, seq, sid) })
	case n < 50:
		crash := rng.IntN(4) == 0
		s.spawn("delete dir", func(yield yieldFunc) { s.deleteDir(yield, dir, crash) })
	case n < 62:
		s.spawn("delete child", func(yield yieldFunc) {
			names, _ := s.c.dir(dir).f.Children(dir)
			if len(names) > 0 {
				child := dir + "/" + pick(rng, names)
				if n, err := s.c.node(child).f.Get(child); err == nil && n.Owner == 0 {
					s.deleteDir(yield, child, false)
				}
			}
		})
	case n < 72:
		if sid := live(); sid != 0 {
			lock := pick(rng, locks)
			s.spawn("enqueue", func(yield yieldFunc) { s.createUnder(yield, lock, "lock-", command.OpEnqueue, false, sid) })
		}
	case n < 78:
		lock := pick(rng, locks)
		s.spawn("release", func(yield yieldFunc) { s.releaseOne(yield, lock) })
	case n < 85:
		id := rng.Uint64() | 1
		s.sessions = append(s.sessions, id)
		s.spawn("session create", func(yield yieldFunc) {
			s.propose(yield, 0, command.Command{Op: command.OpSessionCreate, SessionID: id, TimeoutMs: 1000})
		})
	case n < 91:
		if sid := live(); sid != 0 {
			op := command.Command{Op: command.OpSessionClose, SessionID: sid}
			if rng.IntN(2) == 0 {
				op = command.Command{Op: command.OpSessionExpire, Sessions: []uint64{sid}}
			}
			s.spawn("session end", func(yield yieldFunc) { s.propose(yield, 0, op) })
		}
	case n < 97:
		s.spawn("cleanup", s.cleanup)
	default:
		if len(s.crashed) > 0 {
			i := rng.IntN(len(s.crashed))
			d := s.crashed[i]
			s.crashed = slices.Delete(s.crashed, i, i+1)
			s.spawn("recover delete", func(yield yieldFunc) { s.finishDelete(yield, d, false) })
		}
	}
}

// step runs an actor's next step or commits a pending proposal.
func (s *sim) step() {
	if len(s.pending) > 0 && (len(s.actors) == 0 || s.rng.IntN(3) == 0) {
		s.commit()
		return
	}
	i := s.rng.IntN(len(s.actors))
	if _, more := s.actors[i].next(); !more {
		s.actors[i].stop()
		s.actors = slices.Delete(s.actors, i, i+1)
	}
}

// drain runs every actor to its end.
func (s *sim) drain() {
	for len(s.actors) > 0 || len(s.pending) > 0 {
		s.step()
	}
}

func runShardSimulation(t *testing.T, seed uint64, steps int) []uint64 {
	s := &sim{t: t, c: newCluster(t), rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)),
		lastSeq: map[string]uint64{}, holders: map[string]Node{}, stats: map[string]int{}}
	// Quotas too high to refuse anything: their counts follow every create,
	// delete and session cleanup of every shard (checked by check).
	s.c.setQuotaEverywhere("/", 1<<40, 1<<40)
	s.c.setQuotaEverywhere("/d0", 1<<40, 0)
	s.c.setQuotaEverywhere("/locks", 1<<40, 0)
	var tops, locks []string
	for i := 0; i < 3; i++ {
		tops = append(tops, fmt.Sprintf("/d%d", i))
	}
	s.c.node("/locks").mustApply(put("/locks", ""))
	for i := 0; i < 3; i++ {
		lock := fmt.Sprintf("/locks/L%d", i)
		locks = append(locks, lock)
		s.holders[lock] = Node{}
		s.spawn("lock dir", func(yield yieldFunc) { s.createUnder(yield, "/locks", lock[len("/locks/"):], command.OpPut, false, 0) })
	}
	// Shard 0's leader runs the cleanups for as long as the test runs.
	running := true
	s.spawn("cleanup loop", func(yield yieldFunc) {
		for running {
			s.cleanup(yield)
			if !yield(struct{}{}) {
				return
			}
		}
	})
	for range steps {
		if len(s.actors) < 9 {
			s.spawnRandom(tops, locks)
		}
		s.step()
	}
	running = false
	s.drain()
	for len(s.c.shards[0].f.EndingSessions()) > 0 {
		s.spawn("final cleanup", s.cleanup)
		s.drain()
	}
	// Quiet: no ephemeral node outlives its session anywhere.
	var hashes []uint64
	for k, h := range s.c.shards {
		h.f.owners.Scan(func(o ownerKey) bool {
			if _, err := s.c.shards[0].f.Session(o.owner); err != nil {
				t.Errorf("shard %d: ephemeral %q of ended session %d leaked", k, o.path, o.owner)
			}
			return true
		})
		restored, err := ReadShardSnapshotBytes(t, snapshotBytes(t, h.f), k)
		if err != nil || restored.Hash() != h.f.Hash() {
			t.Fatalf("shard %d: snapshot round trip: %v", k, err)
		}
		hashes = append(hashes, h.f.Hash())
	}
	t.Logf("seed %d: %d steps, commits %v", seed, steps, s.stats)
	return hashes
}

// ReadShardSnapshotBytes reads data as shard k of testShards.
func ReadShardSnapshotBytes(t testing.TB, data []byte, k int) (*FSM, error) {
	t.Helper()
	return ReadShardSnapshot(strings.NewReader(string(data)), k, testShards)
}

// TestShardProtocolSimulation drives the server-side protocols over one
// state machine per shard with random interleavings and checks: no child
// under a deleted directory, no leaked ephemeral or session state, the
// per-shard tree invariants, sequential names never reused, lock tokens
// strictly increasing; and that the same seed replays to the same states.
func TestShardProtocolSimulation(t *testing.T) {
	seed := testSeed(t)
	steps := *stepsFlag * 2
	for i := uint64(0); i < 5; i++ {
		first := runShardSimulation(t, seed+i, steps)
		if t.Failed() {
			return
		}
		if i == 0 {
			if again := runShardSimulation(t, seed, steps); !slices.Equal(first, again) {
				t.Fatalf("seed %d replays to other states: %x then %x", seed, first, again)
			}
		}
	}
}
