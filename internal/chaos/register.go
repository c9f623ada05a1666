package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/linearize"
)

// registers is workload L: get, put and CAS on a few keys from several
// clients, each request to a random member; the history is checked with
// Porcupine's versioned-register model.
type registers struct {
	recorder *linearize.Recorder
}

const (
	registerKeys    = 8
	registerClients = 5
)

func (w *registers) start(r *run) {
	w.recorder = linearize.NewRecorder()
	for c := range registerClients {
		r.wg.Add(1)
		go w.client(r, c)
	}
}

func (w *registers) client(r *run, worker int) {
	defer r.wg.Done()
	id := w.recorder.NewClient()
	versions := map[string]uint64{} // last version this client saw per key
	for seq := 0; !r.stopped(); seq++ {
		key := fmt.Sprintf("/reg/k%d", r.intn(registerKeys))
		value := fmt.Sprintf("c%d-%d", worker, seq)
		var in linearize.Input
		switch r.intn(3) {
		case 0:
			in = linearize.Input{Kind: linearize.Get, Key: key}
		case 1:
			in = linearize.Input{Kind: linearize.Put, Key: key, Value: value}
		default:
			in = linearize.Input{Kind: linearize.CAS, Key: key, Value: value, Expect: versions[key]}
		}
		out, known := w.do(r, id, in)
		if !known {
			id = w.recorder.NewClient() // the unknown write stays open
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if out.Version > 0 {
			versions[key] = out.Version
		}
	}
}

// do performs in on a random member and records it; known is false when
// the outcome is unknown or the read failed.
func (w *registers) do(r *run, id int, in linearize.Input) (linearize.Output, bool) {
	ctx, cancel := requestContext()
	defer cancel()
	base := r.node()
	call := w.recorder.Begin(id, in)
	var node api.Node
	var err error
	switch in.Kind {
	case linearize.Get:
		err = callKV(ctx, http.MethodGet, base, in.Key, url.Values{"consistency": {api.Linearizable}}, nil, &node)
	case linearize.Put:
		err = callKV(ctx, http.MethodPut, base, in.Key, nil, &api.PutRequest{Value: in.Value}, &node)
	case linearize.CAS:
		prev := "none"
		if in.Expect > 0 {
			prev = strconv.FormatUint(in.Expect, 10)
		}
		err = callKV(ctx, http.MethodPut, base, in.Key, url.Values{"prev_version": {prev}}, &api.PutRequest{Value: in.Value}, &node)
	}
	switch {
	case err == nil && in.Kind == linearize.Get:
		out := linearize.Output{Found: true, Value: node.Value, Version: node.Version}
		call.Return(out)
		return out, true
	case err == nil:
		out := linearize.Output{Version: node.Version}
		call.Return(out)
		return out, true
	case in.Kind == linearize.Get && code(err) == api.CodeNotFound:
		call.Return(linearize.Output{})
		return linearize.Output{}, true
	case in.Kind == linearize.CAS && code(err) == api.CodePreconditionFailed:
		call.Return(linearize.Output{Refused: true})
		return linearize.Output{Refused: true}, true
	case errors.Is(err, errNotSent):
		call.Drop()
		return linearize.Output{}, true
	default:
		call.Unknown()
		return linearize.Output{}, false
	}
}

func callKV(ctx context.Context, method, base, key string, query url.Values, in, out any) error {
	return call(ctx, method, base, "/v1/kv"+key, query, in, out)
}

// finalReads reads every key once more, now that the clients stopped and
// the cluster is quiet: a read called after every other operation returned
// lets the check rule out writes of unknown outcome that it shows had no
// effect (see linearize's pruneUnobserved).
func (w *registers) finalReads(r *run) {
	id := w.recorder.NewClient()
	for k := range registerKeys {
		in := linearize.Input{Kind: linearize.Get, Key: fmt.Sprintf("/reg/k%d", k)}
		for attempt := 0; attempt < 10; attempt++ {
			if _, known := w.do(r, id, in); known {
				break
			}
			id = w.recorder.NewClient()
		}
	}
}

func (w *registers) check(r *run) error {
	w.finalReads(r)
	res, err := w.recorder.Check(90 * time.Second)
	if err != nil {
		return fmt.Errorf("linearizability check: %w", err)
	}
	r.logf("chaos L: %s", res)
	r.report.Operations += res.Operations
	r.report.Linearized += res.Operations
	if res.Outcome == porcupine.Unknown {
		r.report.Unknown++
	}
	if !res.Linearizable() {
		r.anomaly("L: history not linearizable: %s", res)
		w.visualize(r, res)
	}
	return nil
}

func (w *registers) visualize(r *run, res linearize.Result) {
	path := fmt.Sprintf("%s/chaos-seed-%d-linearizability.html", os.TempDir(), r.cfg.Seed)
	if err := res.Visualize(path); err != nil {
		r.logf("chaos L: %v", err)
		return
	}
	r.logf("chaos L: visualization in %s", path)
}
