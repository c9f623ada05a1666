package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed of the randomized fsm tests (0: time-based)")
	stepsFlag = flag.Int("steps", 3000, "commands per randomized fsm test")
)

func testSeed(t *testing.T) uint64 { return testseed.Pick(t, *seedFlag, "") }

// commandGenerator makes random commands over a small tree so that
// conflicts, retries and session deaths are frequent.
type commandGenerator struct {
	rng      *rand.Rand
	index    uint64   // the index the next command will be applied at
	sessions []uint64 // ids of created sessions, live or not
	seqs     map[uint64]uint64
}

func newCommandGenerator(seed uint64) *commandGenerator {
	return &commandGenerator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seqs: map[uint64]uint64{}}
}

func (g *commandGenerator) path() string {
	names := []string{"a", "b", "c", "l-", "ab"}
	p := ""
	for range 1 + g.rng.IntN(3) {
		p += "/" + names[g.rng.IntN(len(names))]
	}
	return p
}

func (g *commandGenerator) session() uint64 {
	if len(g.sessions) == 0 || g.rng.IntN(20) == 0 {
		return uint64(1 + g.rng.IntN(int(g.index)+1)) // often not a session at all
	}
	return g.sessions[g.rng.IntN(len(g.sessions))]
}

// exactlyOnce gives c a session and a request seq: usually the next one,
// sometimes a retry of a recent one or one from the past.
func (g *commandGenerator) exactlyOnce(c *command.Command) {
	if g.rng.IntN(3) == 0 {
		return
	}
	c.SessionID = g.session()
	next := g.seqs[c.SessionID] + 1
	switch g.rng.IntN(6) {
	case 0:
		c.RequestSeq = uint64(1 + g.rng.IntN(int(next)))
	case 1:
		c.RequestSeq = next + uint64(g.rng.IntN(3)) // a gap: applied out of order
	default:
		c.RequestSeq = next
	}
	g.seqs[c.SessionID] = max(g.seqs[c.SessionID], c.RequestSeq)
}

func (g *commandGenerator) next() command.Command {
	g.index++
	var c command.Command
	switch n := g.rng.IntN(100); {
	case n < 35:
		c = command.Command{Op: command.OpPut, Path: g.path(), Value: []byte(fmt.Sprint(g.index))}
		if g.rng.IntN(4) == 0 {
			c.Precondition = command.Precondition(1 + g.rng.IntN(2))
			c.Version = uint64(g.rng.IntN(3))
		}
		c.Sequential = g.rng.IntN(5) == 0
		g.exactlyOnce(&c)
		if c.SessionID != 0 && g.rng.IntN(2) == 0 {
			c.Ephemeral = true
		}
	case n < 45:
		c = command.Command{Op: command.OpEnqueue, Path: "/locks/" + g.path()[1:2] + "/l-", Ephemeral: true, Sequential: true, SessionID: g.session()}
	case n < 55:
		c = command.Command{Op: command.OpDelete, Path: g.path(), Recursive: g.rng.IntN(2) == 0}
		g.exactlyOnce(&c)
	case n < 64:
		c = g.txn()
	case n < 70:
		c = command.Command{Op: command.OpSessionCreate, TimeoutMs: uint64(1000 + g.rng.IntN(9000))}
		g.sessions = append(g.sessions, g.index)
	case n < 80:
		c = command.Command{Op: command.OpSessionClose, SessionID: g.session()}
	case n < 88:
		c = command.Command{Op: command.OpSessionExpire, Sessions: []uint64{g.session(), g.session()}}
	case n < 92:
		c = command.Command{Op: command.OpMemberSet, Member: command.Member{ID: uint64(1 + g.rng.IntN(5)), Name: fmt.Sprint("n", g.index)}}
	case n < 95:
		c = command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: uint64(1 + g.rng.IntN(5))}}
	default:
		c = command.Command{Op: command.OpNoop}
	}
	return c
}

// txn makes a transaction of one to four random operations, often
// conflicting with each other or the tree, so that both refusals at every
// position and applied transactions are frequent.
func (g *commandGenerator) txn() command.Command {
	c := command.Command{Op: command.OpTxn}
	g.exactlyOnce(&c)
	for range 1 + g.rng.IntN(4) {
		op := command.TxnOp{Kind: command.TxnKind(g.rng.IntN(4)), Path: g.path()}
		switch op.Kind {
		case command.TxnCreate:
			op.Value = []byte(fmt.Sprint(g.index))
			op.Sequential = g.rng.IntN(3) == 0
			op.Ephemeral = c.SessionID != 0 && g.rng.IntN(2) == 0
		case command.TxnSet:
			op.Value = []byte(fmt.Sprint(g.index))
		case command.TxnDelete:
			op.Recursive = g.rng.IntN(2) == 0
		}
		if op.Kind != command.TxnCreate && g.rng.IntN(3) == 0 {
			op.Precondition, op.Version = command.PrecondVersion, uint64(1+g.rng.IntN(2))
		}
		if op.Kind == command.TxnCheck && g.rng.IntN(3) == 0 {
			op.Precondition, op.Version = command.PrecondNone, 0
		}
		c.Ops = append(c.Ops, op)
	}
	return c
}

// TestDeterminism applies one random command sequence to two state machines,
// to one restored from a snapshot taken midway and checks equal results,
// events and hashes at every index; a clone taken midway must not change.
func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	g := newCommandGenerator(seed)
	steps := *stepsFlag
	a, b := New(), New()
	var restored, clone *FSM
	var cloneBytes []byte
	for i := 0; i < steps; i++ {
		c := g.next()
		if i%500 == 0 { // a conf-change-like entry without a command
			a.Advance(g.index)
			b.Advance(g.index)
			if restored != nil {
				restored.Advance(g.index)
			}
			g.index++
		}
		// Each replica decodes its own copy, as from its own log.
		resultA, eventsA := a.Apply(g.index, decoded(t, c))
		resultB, eventsB := b.Apply(g.index, decoded(t, c))
		if !reflect.DeepEqual(resultA, resultB) || !reflect.DeepEqual(eventsA, eventsB) {
			t.Fatalf("index %d %+v: replicas differ:\n%+v %v\n%+v %v", g.index, c, resultA, eventsA, resultB, eventsB)
		}
		for _, f := range []*FSM{a, b, restored} {
			if f == nil {
				continue
			}
			if err := checkNodeCache(f); err != nil {
				t.Fatalf("index %d %+v: %v", g.index, c, err)
			}
		}
		if restored != nil {
			resultR, eventsR := restored.Apply(g.index, decoded(t, c))
			if !reflect.DeepEqual(resultA, resultR) || !reflect.DeepEqual(eventsA, eventsR) {
				t.Fatalf("index %d %+v: restored replica differs:\n%+v %v\n%+v %v", g.index, c, resultA, eventsA, resultR, eventsR)
			}
			if restored.Hash() != a.Hash() {
				t.Fatalf("index %d: restored replica's hash differs", g.index)
			}
		}
		if a.Hash() != b.Hash() {
			t.Fatalf("index %d %+v: hashes differ:\n%s\n%s", g.index, c, tree(a), tree(b))
		}
		if i == steps/2 {
			data := snapshotBytes(t, a)
			restored = restore(t, data)
			if again := snapshotBytes(t, restored); !bytes.Equal(again, data) {
				t.Fatalf("a restored snapshot serialises differently")
			}
			clone = a.Clone()
			cloneBytes = snapshotBytes(t, clone)
		}
	}
	for name, f := range map[string]*FSM{"a": a, "b": b, "restored": restored, "clone": clone} {
		if err := checkInvariants(f); err != nil {
			t.Errorf("%s: invariants: %v", name, err)
		}
	}
	if !bytes.Equal(snapshotBytes(t, clone), cloneBytes) {
		t.Errorf("the clone changed while the original kept applying")
	}
	t.Logf("%d commands: %d nodes, %d sessions at the end", steps, a.NodeCount(), a.SessionCount())
}

func decoded(t *testing.T, c command.Command) *command.Command {
	t.Helper()
	d, err := command.Unmarshal(c.Marshal())
	if err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return &d
}

// TestCloneIsolation mutates the original in every way after a clone and
// checks that the clone, read and serialised concurrently, never changes.
func TestCloneIsolation(t *testing.T) {
	seed := testSeed(t)
	g := newCommandGenerator(seed)
	original := New()
	for range 2000 {
		c := g.next()
		original.Apply(g.index, &c)
	}
	clone := original.Clone()
	want := snapshotBytes(t, clone)
	wantTree := tree(clone)

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() { // the snapshotter: serialise the clone while the original applies
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			var buf bytes.Buffer
			if err := clone.WriteSnapshot(&buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("the clone's serialisation changed (err %v)", err)
				return
			}
		}
	}()
	for range 3000 {
		c := g.next()
		original.Apply(g.index, &c)
	}
	for _, s := range original.Sessions() { // end every session: ephemerals and windows go
		original.Apply(original.Applied()+1, &command.Command{Op: command.OpSessionClose, SessionID: s.ID})
	}
	original.Apply(original.Applied()+1, &command.Command{Op: command.OpDelete, Path: "/a", Recursive: true})
	close(done)
	wg.Wait()
	if got := tree(clone); got != wantTree {
		t.Errorf("the clone's tree changed")
	}
	if !bytes.Equal(snapshotBytes(t, clone), want) {
		t.Errorf("the clone's serialisation changed")
	}
	// The clone can apply too, without affecting the original.
	before := original.Hash()
	clone.Apply(original.Applied()+1, &command.Command{Op: command.OpPut, Path: "/from-clone"})
	if original.Hash() != before {
		t.Errorf("applying to the clone changed the original")
	}
}

// TestRefusedWritesChangeNothing applies random commands (transactions of
// one to four operations among them) and checks that every refused one
// without an exactly-once request (whose refusal the window records)
// leaves the state as it was, but for the applied index: on one shard,
// under quotas, and on a shard of several (where the generator's commands
// mostly meet sharding's refusals: sessions live in shard 0, a directory
// must be opened in its children's shard). A transaction relies on it: it
// takes no undo copy for its last operation (txn).
func TestRefusedWritesChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, g *commandGenerator) *FSM
		mustSee api.Code // a refusal the run must include
	}{
		{"one shard", func(*testing.T, *commandGenerator) *FSM { return New() }, api.CodePreconditionFailed},
		{"quotas", func(t *testing.T, g *commandGenerator) *FSM {
			// Small limits on the generator's paths, so that quota
			// refusals are frequent: nodes under /a and /c, bytes under
			// /b and /ab. Several prefixes, because a run can make one
			// an ephemeral node early and keep it (no children, so no
			// quota to meet): seed 1796463180267283466 did with /a and
			// /b alone.
			f := New()
			quotas := []command.Command{quotaSet("/a", 4, 1<<20), quotaSet("/b", 1<<20, 48), quotaSet("/c", 4, 1<<20), quotaSet("/ab", 1<<20, 48)}
			for _, q := range quotas {
				g.index++
				if r, _ := f.Apply(g.index, &q); r.Err != nil {
					t.Fatalf("set quota: %v", r.Err)
				}
			}
			return f
		}, api.CodeQuotaExceeded},
		{"shard 1 of 3", func(t *testing.T, _ *commandGenerator) *FSM {
			f, err := NewShard(1, 3)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}, api.CodeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedWritesChangeNothing(t, tc.setup, tc.mustSee) })
	}
}

// refusedWritesChangeNothing applies random commands to the state machine
// setup returns, and checks that every refused one left it as it was.
func refusedWritesChangeNothing(t *testing.T, setup func(t *testing.T, g *commandGenerator) *FSM, mustSee api.Code) {
	seed := testSeed(t)
	g := newCommandGenerator(seed)
	f := setup(t, g)
	refused := map[command.Op]int{}
	codes := map[api.Code]int{}
	for range *stepsFlag {
		var c command.Command
		if c = g.next(); g.rng.IntN(2) == 0 {
			c = g.txn() // at next's index
		}
		before := f.Clone()
		result, events := f.Apply(g.index, decoded(t, c))
		if result.Err == nil || c.RequestSeq != 0 {
			continue
		}
		refused[c.Op]++
		codes[api.CodeOf(result.Err)]++
		if len(events) > 0 {
			t.Fatalf("seed %d, index %d: refused %+v published %v", seed, g.index, c, events)
		}
		if err := checkInvariants(f); err != nil {
			t.Fatalf("seed %d, index %d: after refused %+v: %v", seed, g.index, c, err)
		}
		before.Advance(f.Applied())
		if before.Hash() != f.Hash() {
			t.Fatalf("seed %d, index %d: refused %+v (%v) changed the state:\n%s\nwas\n%s", seed, g.index, c, result.Err, tree(f), tree(before))
		}
	}
	if refused[command.OpTxn] == 0 || refused[command.OpPut] == 0 || codes[mustSee] == 0 {
		t.Fatalf("seed %d: too few refusals to test: %v, %v (want some %s)", seed, refused, codes, mustSee)
	}
	t.Logf("refusals checked by operation: %v; by code: %v", refused, codes)
}
