package check

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
)

// TestSetCheckReportsLostParent runs the set workload's check against a
// member that lost every create under a parent, the parent too (acknowledged
// creates that were never made durable): the listing answers not_found, and
// the check must report each acknowledged create as lost (D), not give up.
func TestSetCheckReportsLostParent(t *testing.T) {
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeNotFound, Message: "no such node"}})
	}))
	defer member.Close()
	report := Report{}
	r := NewRun(Options{Seed: 1, Target: Endpoints{member.URL}}, &report)
	w := &sequences{acked: map[string][]api.Node{
		"/seq/p0": {{Path: "/seq/p0/item-0000000001", CreatedIndex: 7}, {Path: "/seq/p0/item-0000000002", CreatedIndex: 9}},
	}}
	if err := w.Check(r); err != nil {
		t.Fatalf("check could not run: %v", err)
	}
	if report.Lost != 2 {
		t.Errorf("lost %d acknowledged creates, want 2; anomalies %q", report.Lost, report.Anomalies)
	}
	missing := 0
	for _, a := range report.Anomalies {
		if strings.HasPrefix(a, "D: acknowledged /seq/p0/item-") && strings.Contains(a, "missing on") {
			missing++
		}
	}
	if missing != 2 {
		t.Errorf("%d D anomalies naming a missing create, want 2: %q", missing, report.Anomalies)
	}
}

// TestSetCheckReportsReusedName: a cluster that forgot an acknowledged
// create and handed its name out again lists the name on every member, and
// the node there is the later one. The check must report the earlier create
// as lost (D), whatever the sample of checkIdentity reads.
func TestSetCheckReportsReusedName(t *testing.T) {
	const reused = "/seq/p0/item-0000000002"
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Query().Get("children") == "true" {
			_ = json.NewEncoder(w).Encode(api.Children{Path: "/seq/p0", Children: []string{"item-0000000001", "item-0000000002"}, Index: 30})
			return
		}
		created := uint64(7)
		if strings.HasSuffix(req.URL.Path, reused) {
			created = 20 // the later create holds the name
		}
		_ = json.NewEncoder(w).Encode(api.Node{Path: strings.TrimPrefix(req.URL.Path, "/v1/kv"), CreatedIndex: created})
	}))
	defer member.Close()
	report := Report{}
	r := NewRun(Options{Seed: 1, Target: Endpoints{member.URL}}, &report)
	w := &sequences{acked: map[string][]api.Node{
		"/seq/p0": {{Path: "/seq/p0/item-0000000001", CreatedIndex: 7}, {Path: reused, CreatedIndex: 20}, {Path: reused, CreatedIndex: 9}},
		// A log that restarted from nothing hands out the same name at the
		// same index: two creates acknowledged as one node.
		"/seq/p1": {{Path: "/seq/p1/item-0000000001", CreatedIndex: 3}, {Path: "/seq/p1/item-0000000001", CreatedIndex: 3}},
	}}
	if err := w.Check(r); err != nil {
		t.Fatalf("check could not run: %v", err)
	}
	want := "D: acknowledged " + reused + " (index 9) lost: its name was acknowledged again, for a create at index 20"
	if !slices.Contains(report.Anomalies, want) {
		t.Errorf("no anomaly %q: %q", want, report.Anomalies)
	}
	want = "D: acknowledged /seq/p1/item-0000000001 (index 3) lost: its name was acknowledged again, for a create at index 3"
	if !slices.Contains(report.Anomalies, want) {
		t.Errorf("no anomaly %q: %q", want, report.Anomalies)
	}
	if report.Lost < 2 {
		t.Errorf("lost %d acknowledged creates, want at least 2", report.Lost)
	}
}
