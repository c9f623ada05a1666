package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check/linearize"
)

// multiHistory records a history of the multi-key model.
type multiHistory struct {
	start   time.Time
	mu      sync.Mutex // guards ops
	ops     []porcupine.Operation
	clients atomic.Int64
	unknown atomic.Int64
	settled atomic.Int64
	values  atomic.Int64
}

func (h *multiHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *multiHistory) add(client int, in linearize.MultiInput, out linearize.MultiOutput, call int64) {
	ret := h.now()
	if out.Unknown {
		ret = math.MaxInt64
		h.unknown.Add(1)
	} else {
		h.settled.Add(1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// urlPool is the members clients may send to: a crashed one is taken out
// first, so that requests to it do not pile up unknown outcomes.
type urlPool struct {
	mu   sync.Mutex // guards urls
	urls []string
}

func (p *urlPool) pick(random *rand.Rand) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.urls[random.IntN(len(p.urls))]
}

func (p *urlPool) set(urls []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.urls = urls
}

var multiKeys = []string{"/mk/k0", "/mk/k1", "/mk/k2"}

// TestTxnLinearizable: gets, puts and two-key transactions (conditional on
// the versions a client last saw, or not) on three keys, through random
// members across a leader crash and restart, form a linearizable history
// of the multi-key register model (linearize.MultiModel), which a
// transaction seen half applied would break.
func TestTxnLinearizable(t *testing.T) {
	seed := testSeed(t)
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := &multiHistory{start: time.Now()}
	base := c.URL(c.WaitLeader(10 * time.Second))
	for _, key := range multiKeys { // recorded: the model starts with no key
		value := h.nextValue()
		call := h.now()
		node, err := Put(ctx, base, key, value, "")
		if err != nil {
			t.Fatal(err)
		}
		h.add(0, linearize.MultiInput{Kind: linearize.MultiPut, Key: key, Value: value}, linearize.MultiOutput{Version: node.Version}, call)
	}
	pool := &urlPool{urls: c.URLs()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.client(ctx, pool, rand.New(rand.NewPCG(uint64(seed), uint64(i))), stop)
		}()
	}
	progress := func(n int64) {
		t.Helper()
		target := h.settled.Load() + n
		if !waitFor(60*time.Second, func() bool { return h.settled.Load() >= target }) {
			close(stop)
			wg.Wait()
			t.Fatalf("operations stalled at %d settled", h.settled.Load())
		}
	}
	progress(120)
	leader := c.WaitLeader(10 * time.Second)
	pool.set(slices.Delete(c.URLs(), leader, leader+1))
	c.Crash(leader)
	progress(120)
	c.Restart(leader)
	pool.set(c.URLs())
	progress(120)
	close(stop)
	wg.Wait()

	h.mu.Lock()
	history := slices.Clone(h.ops)
	h.mu.Unlock()
	start := time.Now()
	verdict, _ := porcupine.CheckOperationsVerbose(linearize.MultiModel(), history, 90*time.Second)
	if verdict != porcupine.Ok {
		t.Fatalf("seed %d: %d operations (%d unknown): %s", seed, len(history), h.unknown.Load(), verdict)
	}
	t.Logf("seed %d: %d operations on %d keys (%d unknown outcomes) across a leader crash checked in %v: linearizable",
		seed, len(history), len(multiKeys), h.unknown.Load(), time.Since(start).Round(time.Millisecond))
}

func (h *multiHistory) nextValue() string { return fmt.Sprintf("v%d", h.values.Add(1)) }

// client issues random operations until stop is closed; after an unknown
// outcome it goes on as a new client, the old one's operation being open.
func (h *multiHistory) client(ctx context.Context, pool *urlPool, random *rand.Rand, stop <-chan struct{}) {
	id := int(h.clients.Add(1))
	versions := map[string]uint64{}
	for {
		select {
		case <-stop:
			return
		default:
		}
		in := h.randomInput(random, versions)
		call := h.now()
		out, definite := h.do(ctx, pool.pick(random), in)
		switch {
		case !definite && in.Kind == linearize.MultiGet:
			// a failed read observed nothing: not recorded
		case !definite:
			h.add(id, in, linearize.MultiOutput{Unknown: true}, call)
			id = int(h.clients.Add(1))
		default:
			h.add(id, in, out, call)
			observe(versions, in, out)
		}
		if !definite {
			select {
			case <-stop:
			case <-time.After(time.Duration(5+random.IntN(20)) * time.Millisecond): // pacing, not correctness
			}
		}
	}
}

func (h *multiHistory) randomInput(random *rand.Rand, versions map[string]uint64) linearize.MultiInput {
	key := multiKeys[random.IntN(len(multiKeys))]
	switch r := random.IntN(10); {
	case r < 4:
		return linearize.MultiInput{Kind: linearize.MultiGet, Key: key}
	case r < 6:
		return linearize.MultiInput{Kind: linearize.MultiPut, Key: key, Value: h.nextValue()}
	}
	other := multiKeys[random.IntN(len(multiKeys)-1)]
	if other >= key {
		other = multiKeys[slices.Index(multiKeys, other)+1]
	}
	in := linearize.MultiInput{Kind: linearize.MultiTxn}
	for _, k := range []string{key, other} {
		set := linearize.TxnSet{Key: k, Value: h.nextValue()}
		if random.IntN(2) == 0 {
			set.Expect = versions[k] // 0 (any) until the client has seen k
		}
		in.Sets = append(in.Sets, set)
	}
	return in
}

// observe remembers the versions out showed.
func observe(versions map[string]uint64, in linearize.MultiInput, out linearize.MultiOutput) {
	switch {
	case in.Kind == linearize.MultiTxn && !out.Refused:
		for i, set := range in.Sets {
			versions[set.Key] = out.Versions[i]
		}
	case in.Kind != linearize.MultiTxn && out.Version != 0:
		versions[in.Key] = out.Version
	}
}

// do sends in to url; definite is false when the outcome is unknown.
func (h *multiHistory) do(ctx context.Context, url string, in linearize.MultiInput) (out linearize.MultiOutput, definite bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	switch in.Kind {
	case linearize.MultiGet:
		node, err := Get(ctx, url, in.Key, "")
		if err != nil {
			return out, false
		}
		return linearize.MultiOutput{Found: true, Value: node.Value, Version: node.Version}, true
	case linearize.MultiPut:
		node, err := Put(ctx, url, in.Key, in.Value, "")
		return linearize.MultiOutput{Version: node.Version}, err == nil
	}
	req := api.TxnRequest{}
	for _, set := range in.Sets {
		op := api.TxnOp{Op: api.TxnSet, Path: set.Key, Value: &set.Value}
		if set.Expect != 0 {
			op.Version = &set.Expect
		}
		req.Ops = append(req.Ops, op)
	}
	var reply api.Txn
	err := Do(ctx, "POST", url, "/v1/txn", nil, req, &reply)
	var apiErr *api.Error
	switch {
	case err == nil:
		for _, r := range reply.Results {
			out.Versions = append(out.Versions, r.Version)
		}
		return out, true
	case errors.As(err, &apiErr) && apiErr.Code == api.CodePreconditionFailed:
		return linearize.MultiOutput{Refused: true}, true
	}
	return out, false
}
