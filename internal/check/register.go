package check

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check/linearize"
)

// registers is workload L: get, put and CAS on a few keys from several
// clients, each request to a random member; the history is checked with
// Porcupine's versioned-register model. The keys rotate: after every
// opsPerGeneration operations the clients move to a fresh set of keys, so
// each key's history (which Porcupine searches on its own) stays short and
// a write of unknown outcome stays open in one short history only.
// Linearizability is local, so checking key by key loses nothing.
type registers struct {
	recorder *linearize.Recorder
	ops      atomic.Int64 // operations begun, for the key generation

	mu   sync.Mutex      // guards keys
	keys map[string]bool // every key used, for the final reads
}

const (
	registerKeys     = 8
	registerClients  = 5
	opsPerGeneration = 2000 // about 250 operations per key
)

// key picks a key of the current generation and notes it.
func (w *registers) key(r *Run) string {
	key := r.Key(fmt.Sprintf("/reg/g%d/k%d", w.ops.Add(1)/opsPerGeneration, r.Intn(registerKeys)))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys[key] = true
	return key
}

func (w *registers) Start(r *Run) {
	w.recorder = linearize.NewRecorder()
	w.keys = map[string]bool{}
	for c := range registerClients {
		r.Workers.Add(1)
		go w.client(r, c)
	}
}

func (w *registers) client(r *Run, worker int) {
	defer r.Workers.Done()
	id := w.recorder.NewClient()
	versions := map[string]uint64{} // last version this client saw per key
	for seq := 0; !r.Stopped(); seq++ {
		key := w.key(r)
		value := fmt.Sprintf("c%d-%d", worker, seq)
		var in linearize.Input
		switch r.Intn(3) {
		case 0:
			in = linearize.Input{Kind: linearize.Get, Key: key}
		case 1:
			in = linearize.Input{Kind: linearize.Put, Key: key, Value: value}
		default:
			in = linearize.Input{Kind: linearize.CAS, Key: key, Value: value, Expect: versions[key]}
		}
		out, result := w.do(r, id, in)
		switch result {
		case outcomeUnknown:
			id = w.recorder.NewClient() // the unknown write stays open
			time.Sleep(20 * time.Millisecond)
			continue
		case outcomeNotSent:
			time.Sleep(5 * time.Millisecond) // every member may be down: do not spin
			continue
		}
		if out.Version > 0 {
			versions[key] = out.Version
		}
	}
}

// outcome is how a request of the workload ended.
type outcome int

const (
	outcomeKnown   outcome = iota // recorded with its result
	outcomeUnknown                // recorded as open: a write that may or may not have happened, or a failed read
	outcomeNotSent                // dropped: it reached no server
)

// do performs in on a random member and records it.
func (w *registers) do(r *Run, id int, in linearize.Input) (linearize.Output, outcome) {
	ctx, cancel := RequestContext()
	defer cancel()
	base := r.Node()
	op := w.recorder.Begin(id, in)
	var node api.Node
	var err error
	switch in.Kind {
	case linearize.Get:
		err = r.CallKV(ctx, http.MethodGet, base, in.Key, url.Values{"consistency": {api.Linearizable}}, nil, &node)
	case linearize.Put:
		err = r.CallKV(ctx, http.MethodPut, base, in.Key, nil, &api.PutRequest{Value: in.Value}, &node)
	case linearize.CAS:
		prev := "none"
		if in.Expect > 0 {
			prev = strconv.FormatUint(in.Expect, 10)
		}
		err = r.CallKV(ctx, http.MethodPut, base, in.Key, url.Values{"prev_version": {prev}}, &api.PutRequest{Value: in.Value}, &node)
	}
	switch {
	case err == nil && in.Kind == linearize.Get:
		out := linearize.Output{Found: true, Value: node.Value, Version: node.Version}
		op.Return(out)
		return out, outcomeKnown
	case err == nil:
		out := linearize.Output{Version: node.Version}
		op.Return(out)
		return out, outcomeKnown
	case in.Kind == linearize.Get && Code(err) == api.CodeNotFound:
		op.Return(linearize.Output{})
		return linearize.Output{}, outcomeKnown
	case in.Kind == linearize.CAS && Code(err) == api.CodePreconditionFailed:
		op.Return(linearize.Output{Refused: true})
		return linearize.Output{Refused: true}, outcomeKnown
	case errors.Is(err, ErrNotSent):
		op.Drop()
		return linearize.Output{}, outcomeNotSent
	default:
		op.Unknown()
		return linearize.Output{}, outcomeUnknown
	}
}

// CallKV is Call on the key-value path of key.
func CallKV(ctx context.Context, method, base, key string, query url.Values, in, out any) error {
	return Call(ctx, method, base, "/v1/kv"+key, query, in, out)
}

// CallKV is the package's CallKV sent with the run's client.
func (r *Run) CallKV(ctx context.Context, method, base, key string, query url.Values, in, out any) error {
	return r.Call(ctx, method, base, "/v1/kv"+key, query, in, out)
}

// finalReads reads every key once more, now that the clients stopped and
// the cluster is quiet: a read called after every other operation returned
// lets the check rule out writes of unknown outcome that it shows had no
// effect (see linearize's pruneUnobserved).
func (w *registers) finalReads(r *Run) {
	id := w.recorder.NewClient()
	w.mu.Lock()
	keys := slices.Sorted(maps.Keys(w.keys))
	w.mu.Unlock()
	for _, key := range keys {
		in := linearize.Input{Kind: linearize.Get, Key: key}
		for attempt := 0; attempt < 10; attempt++ {
			if _, result := w.do(r, id, in); result == outcomeKnown {
				break
			}
			id = w.recorder.NewClient()
		}
	}
}

func (w *registers) Check(r *Run) error {
	w.finalReads(r)
	res, err := w.recorder.Check(90 * time.Second)
	if err != nil {
		return fmt.Errorf("linearizability check: %w", err)
	}
	r.Logf("check L: %s", res)
	r.Report.Operations += res.Operations
	r.Report.Linearized += res.Operations
	if res.Outcome == porcupine.Unknown {
		r.Report.Unknown++
	}
	if !res.Linearizable() {
		r.Anomaly("L: history not linearizable: %s", res)
		w.visualize(r, res)
	}
	return nil
}

func (w *registers) visualize(r *Run, res linearize.Result) {
	path := filepath.Join(r.OutDir, fmt.Sprintf("latch-check-seed-%d-linearizability.html", r.Seed))
	if err := res.Visualize(path); err != nil {
		r.Logf("check L: %v", err)
		return
	}
	r.Logf("check L: visualization in %s", path)
}
