package watch

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed of the randomized watch tests (0: time-based)")
	stepsFlag = flag.Int("steps", 4000, "operations per randomized watch test")
)

func testSeed(t *testing.T) uint64 { return testseed.Pick(t, *seedFlag, "") }

var randomPaths = []string{"/", "/a", "/a/b", "/a/b/c", "/ab", "/ab/c", "/b", "/b/a"}

// model is a reference implementation of the registry's semantics, written
// for clarity: every event ever published is kept, watches are a flat list
// and deduplication uses a set per watch.
type model struct {
	index   uint64
	history []fsm.Event
	current map[string]Current
	watches []*modelWatch
	queues  map[uint64][]api.Event // expected undelivered events per session
}

type modelWatch struct {
	id        uint64
	session   uint64
	spec      Spec
	after     uint64
	alive     bool
	delivered map[deliveredKey]bool
}

type deliveredKey struct {
	index uint64
	path  string
}

func (m *model) publish(entry []fsm.Event) {
	for _, e := range entry {
		m.history = append(m.history, e)
		for _, w := range m.watches {
			key := deliveredKey{e.Index, e.Path}
			if !w.alive || e.Index <= w.after || !matches(w.spec.Path, w.spec.Recursive, e.Path) || w.delivered[key] {
				continue
			}
			w.delivered[key] = true
			w.alive = w.spec.Persistent
			m.queues[w.session] = append(m.queues[w.session], toAPI(w.id, &fired{event: e}))
		}
	}
}

// add mirrors Add with a history that reaches back to index 0.
func (m *model) add(id, session uint64, spec Spec) {
	w := &modelWatch{id: id, session: session, spec: spec, after: max(m.index, spec.KnownIndex), alive: true, delivered: map[deliveredKey]bool{}}
	m.watches = append(m.watches, w)
	known := spec.KnownIndex
	if known == 0 || known >= m.index {
		return
	}
	for i := len(m.history) - 1; i >= 0 && m.history[i].Index > known; i-- {
		if e := m.history[i]; matches(spec.Path, spec.Recursive, e.Path) {
			e.Index = m.index
			m.queues[session] = append(m.queues[session], toAPI(id, &fired{event: e}))
			w.alive = spec.Persistent
			return
		}
	}
}

func (m *model) generateEntry(rng *rand.Rand) []fsm.Event {
	m.index++
	var entry []fsm.Event
	for range 1 + rng.IntN(4) {
		path := randomPaths[rng.IntN(len(randomPaths))]
		c := m.current[path]
		e := fsm.Event{Path: path, Index: m.index}
		switch {
		case !c.Exists:
			e.Kind, c = fsm.EventCreated, Current{Exists: true, Version: 1, CreatedIndex: m.index, ModifiedIndex: m.index}
		case rng.IntN(4) == 0:
			e.Kind, c = fsm.EventDeleted, Current{}
		case rng.IntN(3) == 0:
			e.Kind = fsm.EventChildrenChanged
		default:
			e.Kind = fsm.EventChanged
			c.Version++
			c.ModifiedIndex = m.index
		}
		e.Version = max(c.Version, m.current[path].Version)
		m.current[path] = c
		entry = append(entry, e)
	}
	return entry
}

func TestRandomAgainstModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r := New(Options{QueueLen: 1 << 20, MaxPerSession: 1 << 20, HistoryLen: 1 << 20})
	r.RestoredLocked(0)
	m := &model{current: map[string]Current{}, queues: map[uint64][]api.Event{}}
	for step := range *stepsFlag {
		session := 1 + rng.Uint64N(3)
		switch op := rng.IntN(10); {
		case op < 5:
			var batch []fsm.Event
			for range 1 + rng.IntN(3) {
				entry := m.generateEntry(rng)
				m.publish(entry)
				batch = append(batch, entry...)
			}
			r.PublishLocked(batch)
		case op < 8:
			spec := Spec{
				Path:       randomPaths[rng.IntN(len(randomPaths))],
				Recursive:  rng.IntN(2) == 0,
				Persistent: rng.IntN(2) == 0,
			}
			if rng.IntN(2) == 0 && m.index > 0 {
				spec.KnownIndex = m.index - min(m.index, rng.Uint64N(6)) + rng.Uint64N(2)
			}
			id := mustAdd(t, r, session, spec, m.index, m.current[spec.Path])
			m.add(id, session, spec)
		case op < 9 && len(m.watches) > 0:
			w := m.watches[rng.IntN(len(m.watches))]
			err := r.Cancel(session, w.id)
			if wantOK := w.alive && w.session == session; (err == nil) != wantOK {
				t.Fatalf("step %d: Cancel(%d, %d) = %v, model alive=%v session=%d", step, session, w.id, err, w.alive, w.session)
			}
			if err == nil {
				w.alive = false
			}
		default:
			r.SessionEnded(session)
			for _, w := range m.watches {
				if w.session == session {
					w.alive = false
				}
			}
			delete(m.queues, session)
		}
		if step%50 == 0 || step == *stepsFlag-1 {
			compareWithModel(t, step, r, m)
		}
	}
}

func compareWithModel(t *testing.T, step int, r *Registry, m *model) {
	t.Helper()
	alive := 0
	for _, w := range m.watches {
		if w.alive {
			alive++
		}
	}
	if got := r.Stats().Watches; got != alive {
		t.Fatalf("step %d: %d watches, model has %d", step, got, alive)
	}
	for session := uint64(1); session <= 3; session++ {
		got := pending(r, session)
		for i := 1; i < len(got); i++ {
			if got[i].Index < got[i-1].Index {
				t.Fatalf("step %d: session %d events out of index order: %v", step, session, got)
			}
		}
		// Across watches, events of one index may come in any order;
		// per watch, the order is the model's.
		gotByWatch, wantByWatch := byWatch(got), byWatch(m.queues[session])
		for id := range mergeKeys(gotByWatch, wantByWatch) {
			if g, w := gotByWatch[id], wantByWatch[id]; !reflect.DeepEqual(g, w) {
				t.Fatalf("step %d: session %d watch %s\n got %v\nwant %v", step, session, id, g, w)
			}
		}
	}
}

func mergeKeys(a, b map[string][]api.Event) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

func byWatch(events []api.Event) map[string][]api.Event {
	out := map[string][]api.Event{}
	for _, e := range events {
		out[e.WatchID] = append(out[e.WatchID], e)
	}
	return out
}

// TestConcurrentUse publishes from one goroutine (as the apply loop does,
// under a write lock) while many sessions add and cancel watches (under the
// read lock), replace their streams and consume. Each session checks that
// what it receives is in index order and never duplicated.
func TestConcurrentUse(t *testing.T) {
	seed := testSeed(t)
	r := New(Options{QueueLen: 64, HistoryLen: 256})
	var (
		stateMu sync.RWMutex // stands for the state machine's lock
		index   uint64       // guarded by stateMu
	)
	stop := make(chan struct{})
	var publisher sync.WaitGroup
	publisher.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			stateMu.Lock()
			var batch []fsm.Event
			for range 1 + rng.IntN(3) {
				index++
				for range 1 + rng.IntN(3) {
					kind := fsm.EventKind(rng.IntN(4))
					batch = append(batch, event(kind, randomPaths[rng.IntN(len(randomPaths))], index, index))
				}
			}
			r.PublishLocked(batch)
			stateMu.Unlock()
		}
	})
	const sessions = 8
	var clients sync.WaitGroup
	for session := uint64(1); session <= sessions; session++ {
		clients.Go(func() {
			runClient(t, r, session, rand.New(rand.NewPCG(seed, session+1)), func() uint64 {
				stateMu.RLock()
				return index
			}, stateMu.RUnlock)
		})
	}
	clients.Wait()
	close(stop)
	publisher.Wait()
	for session := uint64(1); session <= sessions; session++ {
		r.SessionEnded(session)
	}
	if s := r.Stats(); s.Watches != 0 || s.Sessions != 0 || s.Queued != 0 || s.Streams != 0 {
		t.Fatalf("stats after every session ended: %+v", s)
	}
	t.Logf("stats: %+v", r.Stats())
}

// clientCheck tracks what one session received across its streams.
type clientCheck struct {
	last uint64
	seen map[string]bool // "watch index path"
}

func (c *clientCheck) check(t *testing.T, session uint64, e api.Event) {
	if e.Index < c.last {
		t.Errorf("session %d: event %+v after index %d", session, e, c.last)
	}
	c.last = e.Index
	key := fmt.Sprintf("%s %d %s", e.WatchID, e.Index, e.Path)
	if c.seen[key] {
		t.Errorf("session %d: duplicate event %+v", session, e)
	}
	c.seen[key] = true
}

// streamReader reads a stream as its consumer does, with Take and Ready.
type streamReader struct {
	stream *Stream
	into   []Delivery
}

func newStreamReader(stream *Stream) *streamReader {
	return &streamReader{stream: stream, into: make([]Delivery, 3)}
}

// poll returns the events the stream hands over within wait (none: at
// once), and false once the stream has ended.
func (sr *streamReader) poll(wait time.Duration) ([]api.Event, bool) {
	n, ended := sr.stream.Take(sr.into)
	if n == 0 && !ended && wait > 0 {
		select {
		case <-sr.stream.Ready():
		case <-sr.stream.Done():
		case <-time.After(wait):
		}
		n, ended = sr.stream.Take(sr.into)
	}
	events := make([]api.Event, n)
	for i, d := range sr.into[:n] {
		events[i] = d.Event()
	}
	return events, !ended
}

// drain returns what the stream hands over until it has ended: nothing,
// once it has (what is still queued stays for the session's next stream).
// It fails the test if the stream has not ended within waitTimeout.
func (sr *streamReader) drain(t *testing.T) []api.Event {
	deadline := time.Now().Add(waitTimeout)
	var events []api.Event
	for time.Now().Before(deadline) {
		got, open := sr.poll(time.Millisecond)
		events = append(events, got...)
		if !open {
			return events
		}
	}
	t.Errorf("the stream did not end within %v", waitTimeout)
	return events
}

// runClient is one session's client: it adds and cancels watches, replaces
// its stream and consumes, checking what it receives.
func runClient(t *testing.T, r *Registry, session uint64, rng *rand.Rand, lockState func() uint64, unlockState func()) {
	check := &clientCheck{seen: map[string]bool{}}
	attach := func() *streamReader { return newStreamReader(r.Stream(session)) }
	reader := attach()
	var ids []uint64
	for range 300 {
		events, open := reader.poll(0)
		for _, e := range events {
			check.check(t, session, e)
		}
		if !open {
			reader = attach() // ended (slow consumer): attach again
			ids = ids[:0]
			continue
		}
		if len(events) > 0 {
			continue
		}
		switch rng.IntN(6) {
		case 0, 1, 2:
			at := lockState()
			spec := Spec{
				Path:       randomPaths[rng.IntN(len(randomPaths))],
				Recursive:  rng.IntN(2) == 0,
				Persistent: rng.IntN(2) == 0,
				KnownIndex: check.last,
			}
			id, err := r.AddLocked(session, spec, at, Current{Exists: true, ModifiedIndex: at})
			unlockState()
			if err != nil {
				t.Errorf("session %d: Add: %v", session, err)
				return
			}
			ids = append(ids, id)
		case 3:
			if len(ids) > 0 {
				_ = r.Cancel(session, ids[rng.IntN(len(ids))]) // it may have fired
			}
		case 4:
			old := reader
			reader = attach()
			if got := old.drain(t); len(got) > 0 { // what it did not take is the new stream's
				t.Errorf("session %d: the replaced stream handed over %v", session, indexes(got))
				return
			}
		default:
			for range rng.IntN(20) {
				events, open := reader.poll(time.Millisecond)
				for _, e := range events {
					check.check(t, session, e)
				}
				if !open {
					break
				}
			}
		}
	}
	reader.stream.Close()
	for _, e := range reader.drain(t) {
		check.check(t, session, e)
	}
}
