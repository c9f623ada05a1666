package check

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// sequences is workloads Q and D: sequential creates under a session,
// retried with the same request_seq on other members until a definite
// answer. Q: acknowledged names are unique and their counters increase
// with their created index, per parent. D: every acknowledged create is
// on every replica at the end, and the replicas list the same children.
type sequences struct {
	mu    sync.Mutex            // guards acked
	acked map[string][]api.Node // parent -> acknowledged creates
}

const (
	sequenceClients = 3
	sequenceParents = 2
)

func (w *sequences) Start(r *Run) {
	w.acked = map[string][]api.Node{}
	for c := range sequenceClients {
		r.Workers.Add(1)
		go w.client(r, c)
	}
}

func (w *sequences) client(r *Run, worker int) {
	defer r.Workers.Done()
	var s *Session
	seq := uint64(0)
	for !r.Stopped() {
		renewed := RenewSession(r, s, 10*time.Second)
		if renewed != s {
			seq = 0 // request_seq counts per session
		}
		if s = renewed; s == nil {
			continue
		}
		seq++
		parent := r.Key(fmt.Sprintf("/seq/p%d", r.Intn(sequenceParents)))
		node, ok := w.create(r, s, parent, seq)
		if ok {
			w.mu.Lock()
			w.acked[parent] = append(w.acked[parent], node)
			w.mu.Unlock()
			r.NoteAcked()
		}
	}
	if s != nil {
		s.Stop()
	}
}

// create retries one sequential create on random members until a definite
// answer or the run stops.
func (w *sequences) create(r *Run, s *Session, parent string, seq uint64) (api.Node, bool) {
	query := url.Values{"sequential": {"true"}, "session_id": {s.ID}, "request_seq": {strconv.FormatUint(seq, 10)}}
	for attempt := 0; attempt < 20 && !r.Stopped(); attempt++ {
		ctx, cancel := RequestContext()
		var node api.Node
		err := r.CallKV(ctx, http.MethodPut, r.Node(), parent+"/item-", query, &api.PutRequest{Value: fmt.Sprintf("%s/%d", s.ID, seq)}, &node)
		cancel()
		switch {
		case err == nil:
			return node, true
		case Code(err) == api.CodeSessionExpired:
			s.SawExpired(r)
			return api.Node{}, false
		case Code(err) == api.CodeInvalidArgument || Code(err) == api.CodeTooLarge:
			r.Anomaly("Q: create under %s refused: %v", parent, err)
			return api.Node{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return api.Node{}, false
}

func (w *sequences) Check(r *Run) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for parent, nodes := range w.acked {
		byIndex := slices.Clone(nodes)
		slices.SortStableFunc(byIndex, func(a, b api.Node) int { return cmp.Compare(a.CreatedIndex, b.CreatedIndex) })
		w.checkOrder(r, parent, byIndex)
		reused := w.checkReused(r, parent, byIndex)
		if err := w.checkPresent(r, parent, nodes); err != nil {
			return err
		}
		w.checkIdentity(r, nodes, reused)
	}
	return nil
}

// identitySample bounds the acknowledged creates checkIdentity reads back.
const identitySample = 100

// checkIdentity is D beyond names: a sample of acknowledged creates is read
// back from every member, and each must still be the node the client was
// told of (same created index). A cluster that forgot creates and handed
// their names out again passes a check by name alone.
func (w *sequences) checkIdentity(r *Run, nodes []api.Node, reused map[string]bool) {
	step := max(1, len(nodes)/identitySample)
	wrong := 0
	for k := 0; k < len(nodes); k += step {
		want := nodes[k]
		if reused[want.Path] {
			continue // checkReused counted its loss
		}
		for _, m := range r.Members() {
			ctx, cancel := RequestContext()
			var got api.Node
			err := r.CallKV(ctx, http.MethodGet, m.ClientURL, want.Path, url.Values{"consistency": {api.Stale}}, nil, &got)
			cancel()
			if err != nil || got.CreatedIndex == want.CreatedIndex {
				continue // a missing node is checkPresent's finding
			}
			r.Report.Lost++
			if wrong++; wrong <= maxReported {
				r.Anomaly("D: acknowledged %s was created at index %d, but %s has it created at %d", want.Path, want.CreatedIndex, m.Name, got.CreatedIndex)
			}
		}
	}
	if wrong > maxReported {
		r.Anomaly("D: %d more acknowledged creates read back with another created index", wrong-maxReported)
	}
}

// maxReported bounds the anomalies a checker lists one by one per parent
// and member; the rest are counted in one more.
const maxReported = 5

// checkOrder is Q: in sorted (the acknowledgements by created index),
// counters strictly increase.
func (w *sequences) checkOrder(r *Run, parent string, sorted []api.Node) {
	bad := 0
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Path <= sorted[i-1].Path || sorted[i].CreatedIndex == sorted[i-1].CreatedIndex {
			if bad++; bad <= maxReported {
				r.Anomaly("Q: %s (index %d) after %s (index %d)", sorted[i].Path, sorted[i].CreatedIndex, sorted[i-1].Path, sorted[i-1].CreatedIndex)
			}
		}
	}
	if bad > maxReported {
		r.Anomaly("Q: %d more acknowledged creates under %s out of order or reused", bad-maxReported, parent)
	}
	r.Report.Operations += len(sorted)
	r.Report.Acked += len(sorted)
}

// checkReused is D by the acknowledgements alone: every acknowledgement
// is of a create of its own (the workload records each create once, its
// retries answered with the same node), so a name acknowledged twice means
// the cluster forgot the earlier create and handed its name out again, at
// a later index or, if its log forgot the index too, at the same one. Every
// member may then list the name (the later node holds it), and
// checkIdentity reads only a sample, so a loss the workload wrote over
// after a crash is found here. It returns the names acknowledged more than
// once, whose losses it counted. sorted is the acknowledgements by
// created index, ties in the order acknowledged.
func (w *sequences) checkReused(r *Run, parent string, sorted []api.Node) map[string]bool {
	earlier := map[string]api.Node{} // path -> its latest acknowledgement so far
	reused := map[string]bool{}
	lost := 0
	for _, n := range sorted {
		before, ok := earlier[n.Path]
		earlier[n.Path] = n
		if !ok {
			continue
		}
		reused[n.Path] = true
		r.Report.Lost++ // the earlier create, gone
		if lost++; lost > maxReported {
			continue
		}
		if before.CreatedIndex == n.CreatedIndex {
			r.Anomaly("D: acknowledged %s (index %d) lost: another create was acknowledged as the same node (the log forgot the index and filled it again)", n.Path, n.CreatedIndex)
		} else {
			r.Anomaly("D: acknowledged %s (index %d) lost: its name was acknowledged again, for a create at index %d", n.Path, before.CreatedIndex, n.CreatedIndex)
		}
	}
	if lost > maxReported {
		r.Anomaly("D: %d more acknowledged creates under %s lost, their names acknowledged again", lost-maxReported, parent)
	}
	return reused
}

// checkPresent is D: every member lists every acknowledged child, and all
// members list the same children.
func (w *sequences) checkPresent(r *Run, parent string, nodes []api.Node) error {
	var newest uint64 // every member must have applied it: the listing's min_index
	for _, n := range nodes {
		newest = max(newest, n.CreatedIndex)
	}
	var first []string
	for i, m := range r.Members() {
		children, err := listChildren(r, m, parent, newest)
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, c := range children.Children {
			have[parent+"/"+c] = true
		}
		missing := 0
		for _, n := range nodes {
			if !have[n.Path] {
				r.Report.Lost++
				if missing++; missing <= maxReported {
					r.Anomaly("D: acknowledged %s (index %d) missing on %s", n.Path, n.CreatedIndex, m.Name)
				}
			}
		}
		if missing > maxReported {
			r.Anomaly("D: %d more acknowledged creates under %s missing on %s", missing-maxReported, parent, m.Name)
		}
		if i == 0 {
			first = children.Children
		} else if !slices.Equal(first, children.Children) {
			r.Anomaly("D: %s lists %d children of %s, %s lists %d: replicas differ at the same applied index",
				r.Members()[0].Name, len(first), parent, m.Name, len(children.Children))
		}
	}
	r.Logf("check Q/D: %d acknowledged creates under %s, on all %d members (%s)", len(nodes), parent, len(r.Members()), strings.Join(first[max(0, len(first)-2):], ","))
	return nil
}

// listChildren lists parent's children on member m once it applied index
// newest, or, if it never reached it (after quiescence: its log lost
// entries), what it has. A parent the member does not have lists no
// children: a cluster that lost every create under it (all of them
// acknowledged but never made durable) removed the parent too, and that is
// D's finding, not a reason the check cannot run.
func listChildren(r *Run, m Member, parent string, newest uint64) (api.Children, error) {
	var children api.Children
	query := url.Values{"children": {"true"}, "consistency": {api.Stale}, "min_index": {strconv.FormatUint(newest, 10)}}
	ctx, cancel := RequestContext()
	err := r.CallKV(ctx, http.MethodGet, m.ClientURL, parent, query, nil, &children)
	cancel()
	if err != nil && Code(err) != api.CodeNotFound {
		delete(query, "min_index")
		ctx, cancel := RequestContext()
		err = r.CallKV(ctx, http.MethodGet, m.ClientURL, parent, query, nil, &children)
		cancel()
	}
	switch {
	case Code(err) == api.CodeNotFound:
		return api.Children{}, nil
	case err != nil:
		return api.Children{}, fmt.Errorf("D: list %s on %s: %w", parent, m.Name, err)
	}
	return children, nil
}
