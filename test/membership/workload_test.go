package membership

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check/linearize"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// workload runs clients that record a linearize history against the
// members currently in its endpoint set (voters and learners alike: a
// learner's linearizable read goes through the leader's ReadIndex). Keys
// rotate every 2s so each Porcupine partition stays small.
type workload struct {
	rec       *linearize.Recorder
	endpoints atomic.Pointer[[]string]
	keys      int
	start     time.Time
	rotate    time.Duration
	values    atomic.Uint64 // makes every written value unique
	timeout   time.Duration // per operation, client side
	stop      chan struct{}
	once      sync.Once // closes stop
	wg        sync.WaitGroup

	// byEndpoint counts definite outcomes per endpoint and kind, so the
	// test can show the learner served checked linearizable reads.
	mu         sync.Mutex // guards byEndpoint
	byEndpoint map[string]map[linearize.Kind]int
}

func newWorkload(endpoints []string) *workload {
	w := &workload{
		rec: linearize.NewRecorder(), keys: 4, start: time.Now(), rotate: 2 * time.Second,
		timeout: 3 * time.Second, stop: make(chan struct{}), byEndpoint: map[string]map[linearize.Kind]int{},
	}
	w.setEndpoints(endpoints)
	return w
}

// setEndpoints replaces the endpoint set; operations in flight finish.
func (w *workload) setEndpoints(endpoints []string) {
	copied := append([]string(nil), endpoints...)
	w.endpoints.Store(&copied)
}

// run starts n clients seeded from seed.
func (w *workload) run(n int, seed uint64) {
	for i := range n {
		w.wg.Add(1)
		go w.client(rand.New(rand.NewPCG(seed, uint64(i))))
	}
}

// halt stops the clients and waits for them; it may be called again.
func (w *workload) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *workload) key(random *rand.Rand) string {
	return fmt.Sprintf("/lin/g%d/k%d", time.Since(w.start)/w.rotate, random.IntN(w.keys))
}

// client issues random operations until stopped. After an operation with an
// unknown outcome it continues as a new client id: that one is still open.
func (w *workload) client(random *rand.Rand) {
	defer w.wg.Done()
	id := w.rec.NewClient()
	versions := map[string]uint64{} // last version this client saw per key
	for !w.stopped() {
		key := w.key(random)
		endpoints := *w.endpoints.Load()
		endpoint := endpoints[random.IntN(len(endpoints))]
		in := linearize.RandomInput(random, key, versions, w.nextValue)
		out, state := w.do(id, endpoint, in)
		switch state {
		case linearize.Settled:
			linearize.Observe(versions, in, out)
		case linearize.LeftOpen:
			id = w.rec.NewClient()
			w.pause(random, 10, 40)
		case linearize.Dropped:
			w.pause(random, 5, 20)
		}
	}
}

// pause waits a random few milliseconds (pacing after a failure, so a
// refused connection does not spin), or until the workload stops.
func (w *workload) pause(random *rand.Rand, minMillis, spreadMillis int) {
	select {
	case <-time.After(time.Duration(minMillis+random.IntN(spreadMillis)) * time.Millisecond):
	case <-w.stop:
	}
}

func (w *workload) nextValue() string { return fmt.Sprintf("v%d", w.values.Add(1)) }

// do runs one operation against endpoint and records it.
func (w *workload) do(client int, endpoint string, in linearize.Input) (linearize.Output, linearize.Settlement) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	call := w.rec.Begin(client, in)
	var (
		node api.Node
		err  error
	)
	switch in.Kind {
	case linearize.Get:
		node, err = testcluster.Get(ctx, endpoint, in.Key, api.Linearizable)
	case linearize.Put:
		node, err = testcluster.Put(ctx, endpoint, in.Key, in.Value, "")
	case linearize.CAS:
		prev := "none"
		if in.Expect != 0 {
			prev = strconv.FormatUint(in.Expect, 10)
		}
		node, err = testcluster.Put(ctx, endpoint, in.Key, in.Value, prev)
	}
	out, settled := call.Settle(node, err)
	if settled == linearize.Settled {
		w.count(endpoint, in.Kind)
	}
	return out, settled
}

func (w *workload) count(endpoint string, kind linearize.Kind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byEndpoint[endpoint] == nil {
		w.byEndpoint[endpoint] = map[linearize.Kind]int{}
	}
	w.byEndpoint[endpoint][kind]++
}

// served returns how many operations of kind endpoint answered definitely.
func (w *workload) served(endpoint string, kind linearize.Kind) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byEndpoint[endpoint][kind]
}

// staleReader checks stale reads through one member: it writes a fresh
// version of its key through the writers' endpoints, then reads the key
// stale from the member with min_index = the write's index, which must
// return that version or a later one (read-your-writes across servers),
// with a reply index at least min_index.
type staleReader struct {
	member  string
	writeTo func() []string
	stop    chan struct{}
	done    chan struct{}

	reads, writes atomic.Int64
	mu            sync.Mutex // guards anomalies
	anomalies     []string
}

func startStaleReader(member string, writeTo func() []string) *staleReader {
	s := &staleReader{member: member, writeTo: writeTo, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *staleReader) halt() []string {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anomalies
}

func (s *staleReader) run() {
	defer close(s.done)
	random := rand.New(rand.NewPCG(1, 2))
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			return
		default:
		}
		endpoints := s.writeTo()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		value := fmt.Sprintf("s%d", i)
		written, err := testcluster.Put(ctx, endpoints[random.IntN(len(endpoints))], "/stale/key", value, "")
		cancel()
		if err != nil {
			select { // pacing after a failed write, not correctness
			case <-time.After(20 * time.Millisecond):
			case <-s.stop:
			}
			continue
		}
		s.writes.Add(1)
		s.check(value, written)
	}
}

// check reads /stale/key from the member with min_index = written.Index;
// value is what that write wrote.
func (s *staleReader) check(value string, written api.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := url.Values{"consistency": {api.Stale}, "min_index": {strconv.FormatUint(written.Index, 10)}}
	var got api.Node
	if err := testcluster.Do(ctx, http.MethodGet, s.member, "/v1/kv/stale/key", q, nil, &got); err != nil {
		return // the member may be busy catching up; a failed read observed nothing
	}
	s.reads.Add(1)
	if got.Version < written.Version || got.Index < written.Index || (got.Version == written.Version && got.Value != value) {
		s.mu.Lock()
		s.anomalies = append(s.anomalies, fmt.Sprintf("stale read with min_index %d after writing %q (version %d) returned %q version %d index %d",
			written.Index, value, written.Version, got.Value, got.Version, got.Index))
		s.mu.Unlock()
	}
}
